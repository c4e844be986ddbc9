package httpx

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/idemkit/idemkit"
)

func newServer(t *testing.T, h http.Handler) (*httptest.Server, *http.Client) {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 100}, Timeout: 30 * time.Second}
	t.Cleanup(client.CloseIdleConnections)
	return srv, client
}

func send(t *testing.T, client *http.Client, method, url, key, body string, hdr ...string) (int, http.Header, string) {
	t.Helper()
	r, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Error(err)
		return 0, nil, ""
	}
	r.Header.Set("Content-Type", "application/json")
	if key != "" {
		r.Header.Set(DefaultHeader, key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := client.Do(r)
	if err != nil {
		t.Error(err)
		return 0, nil, ""
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Error(err)
	}
	return resp.StatusCode, resp.Header, string(b)
}

// TestConcurrentDuplicates sends 100 POSTs with one key at once: the handler runs once, every
// response is the original (or its replay) or 409, and all 2xx bodies are identical.
func TestConcurrentDuplicates(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			var calls atomic.Int64
			bd := setup(t, b, nil, nil)
			h := bd.mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n := calls.Add(1)
				time.Sleep(20 * time.Millisecond) // widen the window for duplicates to meet the claim
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusCreated)
				_, _ = io.WriteString(w, `{"order":`+strconv.FormatInt(n, 10)+`}`)
			}))
			srv, client := newServer(t, h)
			const n = 100
			var wg sync.WaitGroup
			start := make(chan struct{})
			type result struct {
				status   int
				replayed string
				body     string
			}
			results := make([]result, n)
			for i := range n {
				wg.Go(func() {
					<-start
					status, hdr, body := send(t, client, "POST", srv.URL+"/orders", "same-key", `{"item":"book"}`)
					results[i] = result{status, hdr.Get(ReplayedHeader), body}
				})
			}
			close(start)
			wg.Wait()
			if calls.Load() != 1 {
				t.Fatalf("handler ran %d times", calls.Load())
			}
			var created, conflicts, replays int
			for _, r := range results {
				switch r.status {
				case http.StatusCreated:
					created++
					if r.body != `{"order":1}` {
						t.Errorf("2xx body %q", r.body)
					}
					if r.replayed == "true" {
						replays++
					}
				case http.StatusConflict:
					conflicts++
				default:
					t.Errorf("status %d: %s", r.status, r.body)
				}
			}
			if created-replays != 1 {
				t.Errorf("%d original responses, want 1", created-replays)
			}
			t.Logf("%d created (%d replayed), %d in flight", created, replays, conflicts)
		})
	}
}

// TestPanicAndServerError: a panic releases the claim and reaches the outer recoverer; a 5xx
// releases it too; the next retry runs and its result is replayed.
func TestPanicAndServerError(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			bd := setup(t, b, nil, nil)
			var recovered atomic.Value
			recoverer := func(next http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					defer func() {
						if v := recover(); v != nil {
							recovered.Store(v)
							w.WriteHeader(http.StatusInternalServerError)
						}
					}()
					next.ServeHTTP(w, r)
				})
			}
			r := chi.NewRouter()
			r.Use(recoverer, bd.mw)
			r.Post("/orders", bd.serve)
			srv, client := newServer(t, r)

			status, _, _ := send(t, client, "POST", srv.URL+"/orders", "k", `{}`, "X-Test-Panic", "boom")
			if status != 500 || recovered.Load() != "boom" {
				t.Fatalf("panic: status %d, outer recoverer got %v", status, recovered.Load())
			}
			rec, err := bd.guard.Get(context.Background(), "POST /orders", "k")
			if err != nil || rec.Status != idemkit.StatusFailed {
				t.Fatalf("record after the panic: %+v, %v", rec, err)
			}
			status, _, _ = send(t, client, "POST", srv.URL+"/orders", "k", `{}`, "X-Test-Status", "502")
			if status != 502 || bd.calls.Load() != 2 {
				t.Fatalf("retry after the panic: %d, %d calls", status, bd.calls.Load())
			}
			status, _, body := send(t, client, "POST", srv.URL+"/orders", "k", `{}`)
			if status != 201 || bd.calls.Load() != 3 || !strings.Contains(body, `"fence":3`) {
				t.Fatalf("retry after the 5xx: %d %s, %d calls", status, body, bd.calls.Load())
			}
			status, hdr, replay := send(t, client, "POST", srv.URL+"/orders", "k", `{}`)
			if status != 201 || hdr.Get(ReplayedHeader) != "true" || replay != body || bd.calls.Load() != 3 {
				t.Fatalf("replay: %d %s", status, replay)
			}
		})
	}
}

// TestAbortHandlerPanic: http.ErrAbortHandler goes through like any panic and the claim is released.
func TestAbortHandlerPanic(t *testing.T) {
	bd := setup(t, memoryBackend, nil, nil)
	h := bd.mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic(http.ErrAbortHandler) }))
	func() {
		defer func() {
			if v := recover(); v != http.ErrAbortHandler {
				t.Fatalf("recovered %v", v)
			}
		}()
		h.ServeHTTP(httptest.NewRecorder(), req("POST", "/x", "k", `{}`))
	}()
	if rec, err := bd.guard.Get(context.Background(), "POST /x", "k"); err != nil || rec.Status != idemkit.StatusFailed {
		t.Fatalf("record %+v, %v", rec, err)
	}
}

// TestWriterInterfaces: Flush, SetWriteDeadline (through Unwrap) and Hijack work under the
// middleware; a hijacked response is not stored, so the retry runs.
func TestWriterInterfaces(t *testing.T) {
	bd := setup(t, memoryBackend, nil, nil)
	var calls atomic.Int64
	h := bd.mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		rc := http.NewResponseController(w)
		if r.URL.Path == "/hijack" {
			conn, rw, err := rc.Hijack()
			if err != nil {
				t.Errorf("hijack: %v", err)
				return
			}
			defer conn.Close()
			_, _ = rw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 8\r\nConnection: close\r\n\r\nhijacked")
			_ = rw.Flush()
			return
		}
		if err := rc.SetWriteDeadline(time.Now().Add(time.Minute)); err != nil {
			t.Errorf("SetWriteDeadline through Unwrap: %v", err)
		}
		_, _ = io.WriteString(w, "<html>part one ")
		if err := rc.Flush(); err != nil {
			t.Errorf("flush: %v", err)
		}
		if _, ok := w.(http.Flusher); !ok {
			t.Error("writer is not an http.Flusher")
		}
		_, _ = io.WriteString(w, "part two</html>")
	}))
	srv, client := newServer(t, h)

	status, hdr, body := send(t, client, "POST", srv.URL+"/stream", "k", `{}`)
	if status != 200 || body != "<html>part one part two</html>" || hdr.Get("Transfer-Encoding") == "" && hdr.Get("Content-Length") != "" {
		t.Fatalf("streamed: %d %v %q", status, hdr, body)
	}
	_, rhdr, replay := send(t, client, "POST", srv.URL+"/stream", "k", `{}`)
	if replay != body || rhdr.Get("Content-Type") != hdr.Get("Content-Type") || rhdr.Get(ReplayedHeader) != "true" {
		t.Fatalf("replay %q %v, original %q %v", replay, rhdr, body, hdr)
	}

	for i := range 2 {
		conn, err := (&net.Dialer{}).Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.WriteString(conn, "POST /hijack HTTP/1.1\r\nHost: x\r\nIdempotency-Key: h\r\nContent-Length: 2\r\n\r\n{}")
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		conn.Close()
		if string(b) != "hijacked" || calls.Load() != int64(2+i) {
			t.Fatalf("hijack %d: %q, %d calls", i, b, calls.Load())
		}
		// The client has its answer before the handler returns; wait for the claim to finish.
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
			rec, err := bd.guard.Get(context.Background(), "POST /hijack", "h")
			if err == nil && rec.Status == idemkit.StatusFailed {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("hijacked claim not released: %+v %v", rec, err)
			}
		}
	}
}

// TestRequestID: X-Request-Id is echoed on handler, replayed and problem responses, and is in
// the context, not in the key.
func TestRequestID(t *testing.T) {
	bd := setup(t, memoryBackend, nil, nil)
	var seen string
	h := bd.mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = RequestID(r.Context())
		w.WriteHeader(201)
	}))
	for i, id := range []string{"req-1", "req-2"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req("POST", "/x", "k", `{}`, "X-Request-Id", id))
		if rec.Header().Get("X-Request-Id") != id {
			t.Fatalf("request %d: echoed %q", i, rec.Header().Get("X-Request-Id"))
		}
		if i == 1 && rec.Header().Get(ReplayedHeader) != "true" {
			t.Fatal("a different request ID made the duplicate run again")
		}
	}
	if seen != "req-1" {
		t.Fatalf("handler saw request ID %q", seen)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req("POST", "/x", "", `{}`, "X-Request-Id", "req-3"))
	if rec.Header().Get("X-Request-Id") != "req-3" || !strings.Contains(rec.Body.String(), `"requestId":"req-3"`) {
		t.Fatalf("problem response: %v %s", rec.Header(), rec.Body)
	}
}

// TestFencedAfterRun: when the claim is taken over while the handler runs, the client still gets
// the handler's response and the newer attempt's outcome stands.
func TestFencedAfterRun(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	logs := &logSink{}
	bd := setup(t, memoryBackend, &Options{Logger: slog.New(logs)}, &idemkit.Options{Now: clock, Lease: time.Second, CacheTTL: -1})
	bd.locker.Locker = nopLocker{} // the lock would turn the takeover away; the Store decides alone

	first := make(chan *httptest.ResponseRecorder)
	go func() {
		rec := httptest.NewRecorder()
		bd.handler.ServeHTTP(rec, req("POST", "/orders", "k", `{}`, "X-Test-Block", "1"))
		first <- rec
	}()
	<-bd.entered
	advance(2 * time.Second) // the first claim's lease runs out
	second := bd.do(req("POST", "/orders", "k", `{}`))
	if second.Code != 201 || !strings.Contains(second.Body.String(), `"fence":2`) {
		t.Fatalf("takeover: %d %s", second.Code, second.Body)
	}
	bd.unblock()
	rec := <-first
	if rec.Code != 201 || !strings.Contains(rec.Body.String(), `"fence":1`) {
		t.Fatalf("fenced attempt's client got %d %s", rec.Code, rec.Body)
	}
	replay := bd.do(req("POST", "/orders", "k", `{}`))
	if replay.Body.String() != second.Body.String() {
		t.Fatalf("replay %s, want the takeover's %s", replay.Body, second.Body)
	}
	if !logs.has("WARN", "no longer this attempt", "another attempt took over", "scope=") {
		t.Fatalf("fenced finish not logged: %q", logs.msgs)
	}
}

// TestStoreFailsAfterRun: the handler ran but its outcome could not be recorded: the client keeps
// the handler's response, the failure is logged with the request ID, and the key stays in flight
// until the lease runs out.
func TestStoreFailsAfterRun(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			logs := &logSink{}
			bd := setup(t, b, &Options{Logger: slog.New(logs)}, nil)
			bd.store.failUpdate.Store(true)
			rec := bd.do(req("POST", "/orders", "k", `{}`, "X-Request-Id", "rid-9"))
			if rec.Code != 201 || !strings.Contains(rec.Body.String(), `"call":1`) {
				t.Fatalf("client got %d %s", rec.Code, rec.Body)
			}
			if !logs.has("WARN", "outcome not recorded", "request_id=rid-9") {
				t.Fatalf("not logged: %q", logs.msgs)
			}
			bd.store.failUpdate.Store(false)
			if rec := bd.do(req("POST", "/orders", "k", `{}`)); rec.Code != 409 || bd.calls.Load() != 1 {
				t.Fatalf("retry during the lease: %d, %d calls", rec.Code, bd.calls.Load())
			}
		})
	}
}

// nopLocker never locks and caches nothing.
type nopLocker struct{}

func (nopLocker) Acquire(context.Context, string, string, time.Duration) ([]byte, error) {
	return nil, nil
}
func (nopLocker) Refresh(context.Context, string, string, time.Duration) error { return nil }
func (nopLocker) Release(context.Context, string, string, []byte, time.Duration) error {
	return nil
}
