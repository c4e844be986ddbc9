package httpx

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"
)

// goneWriter is a client connection that breaks after limit bytes of body: later writes fail, as
// net/http's do once the client has gone.
type goneWriter struct {
	*httptest.ResponseRecorder
	limit int
}

func (g *goneWriter) Write(p []byte) (int, error) {
	room := max(g.limit-g.Body.Len(), 0)
	if len(p) <= room {
		return g.ResponseRecorder.Write(p)
	}
	n, _ := g.ResponseRecorder.Write(p[:room])
	return n, syscall.EPIPE
}

func (g *goneWriter) Flush() {}

// TestClientGoneResponseStoredWhole: a client that goes away while the handler writes its response
// does not leave a cut-short copy behind. The handler's writes keep succeeding while the response is
// recorded, and the retry gets every byte the handler wrote, once.
func TestClientGoneResponseStoredWhole(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			bd := setup(t, b, nil, nil)
			full := strings.Repeat("0123456789abcdef", 8*1024) // 128 KiB, under MaxResponseBytes
			var writeErrs int
			h := bd.mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				bd.calls.Add(1)
				w.Header().Set("Content-Type", "text/plain")
				w.WriteHeader(http.StatusCreated)
				for i := 0; i < len(full); i += 4096 {
					if _, err := io.WriteString(w, full[i:i+4096]); err != nil {
						writeErrs++ // a handler that stops at the first error (io.Copy does)
						return
					}
				}
			}))
			gone := &goneWriter{ResponseRecorder: httptest.NewRecorder(), limit: 8000}
			h.ServeHTTP(gone, req("POST", "/orders", "k", `{}`))
			if gone.Code != http.StatusCreated || gone.Body.Len() != 8000 || writeErrs != 0 {
				t.Fatalf("first: %d, %d bytes reached the client, %d write errors seen by the handler", gone.Code, gone.Body.Len(), writeErrs)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req("POST", "/orders", "k", `{}`))
			if rec.Code != http.StatusCreated || rec.Header().Get(ReplayedHeader) != "true" || rec.Body.String() != full {
				t.Fatalf("retry: %d replayed=%q, %d of %d bytes", rec.Code, rec.Header().Get(ReplayedHeader), rec.Body.Len(), len(full))
			}
			if n := bd.calls.Load(); n != 1 {
				t.Fatalf("handler ran %d times", n)
			}
		})
	}
}

// TestClientGoneOversizeReachesHandler: once a response is too large to record, nothing holds it
// back: the handler sees the client's error and the claim ends as for any unstored response.
func TestClientGoneOversizeReachesHandler(t *testing.T) {
	bd := setup(t, memoryBackend, &Options{MaxResponseBytes: 10_000}, nil)
	var firstErr error
	var written int
	h := bd.mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		for range 10 {
			n, err := w.Write(make([]byte, 4096))
			written += n
			if err != nil {
				firstErr = err
				return
			}
		}
	}))
	h.ServeHTTP(&goneWriter{ResponseRecorder: httptest.NewRecorder(), limit: 5000}, req("POST", "/big", "k", `{}`))
	if !errors.Is(firstErr, syscall.EPIPE) || written != 8192 {
		t.Fatalf("handler: error %v after %d bytes; want EPIPE after 8192 (two recorded writes)", firstErr, written)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req("POST", "/big", "k", `{}`))
	if rec.Code != http.StatusConflict || !strings.Contains(rec.Body.String(), ProblemResponseNotStored) {
		t.Fatalf("retry of an unrecorded response: %d %s", rec.Code, rec.Body)
	}
}

// TestTimeoutHandlerOutside: behind an http.TimeoutHandler that times out before the handler
// answers, the client gets the 503, and the retry gets the handler's whole response, not its status
// with an empty body.
func TestTimeoutHandlerOutside(t *testing.T) {
	bd := setup(t, memoryBackend, nil, nil)
	h := http.TimeoutHandler(bd.mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		bd.calls.Add(1)
		<-r.Context().Done() // the TimeoutHandler cancels it when it answers 503
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"order":42}`)
	})), 20*time.Millisecond, "timeout")
	first := httptest.NewRecorder()
	h.ServeHTTP(first, req("POST", "/orders", "k", `{}`))
	if first.Code != http.StatusServiceUnavailable {
		t.Fatalf("first: %d %q", first.Code, first.Body)
	}
	// The handler goroutine finishes after the TimeoutHandler answered; wait for its record.
	var rec *httptest.ResponseRecorder
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		rec = httptest.NewRecorder()
		h.ServeHTTP(rec, req("POST", "/orders", "k", `{}`))
		if rec.Code != http.StatusConflict || time.Now().After(deadline) {
			break
		}
	}
	if rec.Code != http.StatusCreated || rec.Body.String() != `{"order":42}` || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("retry: %d %v %q", rec.Code, rec.Header(), rec.Body)
	}
	if n := bd.calls.Load(); n != 1 {
		t.Fatalf("handler ran %d times", n)
	}
}

// TestSniffedTypeAsNetHTTP: a handler that sets no Content-Type gets the type net/http sniffs from
// the start of its body, not from its first write alone, and the replay gets the same type.
func TestSniffedTypeAsNetHTTP(t *testing.T) {
	bd := setup(t, memoryBackend, nil, nil)
	h := bd.mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "<")
		_, _ = io.WriteString(w, "html><body>hi</body></html>")
	}))
	// Flushed before any body: net/http sends its headers without a type.
	flushFirst := bd.mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.NewResponseController(w).Flush()
		_, _ = io.WriteString(w, "<html><body>hi</body></html>")
	}))
	bare := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "<")
		_, _ = io.WriteString(w, "html><body>hi</body></html>")
	})
	bareFlushFirst := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.NewResponseController(w).Flush()
		_, _ = io.WriteString(w, "<html><body>hi</body></html>")
	})
	// A status, a flush, then the body: the same, through the handler's WriteHeader.
	statusFlush := func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		http.NewResponseController(w).Flush()
		_, _ = io.WriteString(w, "<html><body>hi</body></html>")
	}
	for _, c := range []struct {
		name, key   string
		guarded, ok http.Handler
	}{{"two writes", "k1", h, bare}, {"flush first", "k2", flushFirst, bareFlushFirst},
		{"status, flush, body", "k3", bd.mw(http.HandlerFunc(statusFlush)), http.HandlerFunc(statusFlush)}} {
		srvBare, client := newServer(t, c.ok)
		_, want, _ := send(t, client, "POST", srvBare.URL+"/x", "", `{}`)
		srv, client := newServer(t, c.guarded)
		_, first, _ := send(t, client, "POST", srv.URL+"/x", c.key, `{}`)
		_, replay, body := send(t, client, "POST", srv.URL+"/x", c.key, `{}`)
		// After a flush with no body, net/http sends no type, and nor does the replay (one write,
		// which net/http would sniff): the stored form says "no type" with a clear.
		_, wantTyped := want["Content-Type"]
		_, replayTyped := replay["Content-Type"]
		if first.Get("Content-Type") != want.Get("Content-Type") || replay.Get("Content-Type") != want.Get("Content-Type") || replayTyped != wantTyped ||
			replay.Get(ReplayedHeader) != "true" || body != "<html><body>hi</body></html>" {
			t.Errorf("%s: net/http alone %q; guarded %q, replay %q (replayed %q, %q)", c.name,
				want.Get("Content-Type"), first.Get("Content-Type"), replay.Get("Content-Type"), replay.Get(ReplayedHeader), body)
		}
	}
}

// TestSuppressedTypeNotSniffedOnReplay: a handler that suppresses the Content-Type (net/http's
// documented way: the field set to nil) sends its body without one; the replay must not gain the
// type net/http would sniff from the replayed body.
func TestSuppressedTypeNotSniffedOnReplay(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			bd := setup(t, b, nil, nil)
			h := bd.mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header()["Content-Type"] = nil
				w.WriteHeader(http.StatusCreated)
				_, _ = io.WriteString(w, "<html><body>hi</body></html>")
			}))
			srv, client := newServer(t, h)
			_, first, _ := send(t, client, "POST", srv.URL+"/x", "k", `{}`)
			_, replay, body := send(t, client, "POST", srv.URL+"/x", "k", `{}`)
			if _, ok := first["Content-Type"]; ok {
				t.Fatalf("first response has a Content-Type %q", first.Get("Content-Type"))
			}
			if ct, ok := replay["Content-Type"]; ok || replay.Get(ReplayedHeader) != "true" || body != "<html><body>hi</body></html>" {
				t.Fatalf("replay: Content-Type %q (first had none), replayed %q, body %q", ct, replay.Get(ReplayedHeader), body)
			}
		})
	}
}

// plainWriter hides every optional interface of the writer it wraps (no Flush, no Unwrap), as an
// older outer middleware's wrapper does: a handler's flush goes nowhere.
type plainWriter struct{ w http.ResponseWriter }

func (p plainWriter) Header() http.Header         { return p.w.Header() }
func (p plainWriter) Write(b []byte) (int, error) { return p.w.Write(b) }
func (p plainWriter) WriteHeader(code int)        { p.w.WriteHeader(code) }

// TestUnflushedStatusKeepsSniffedType: a status, a flush that the writer cannot do
// (http.ErrNotSupported), then the body: net/http sends the headers with the body and sniffs its
// type, and the replay must get the same type, not none.
func TestUnflushedStatusKeepsSniffedType(t *testing.T) {
	bd := setup(t, memoryBackend, nil, nil)
	handler := func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		_ = http.NewResponseController(w).Flush()
		_, _ = io.WriteString(w, "<html><body>hi</body></html>")
	}
	outer := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.ServeHTTP(plainWriter{w}, r) })
	}
	srvBare, client := newServer(t, outer(http.HandlerFunc(handler)))
	_, want, _ := send(t, client, "POST", srvBare.URL+"/x", "", `{}`)
	srv, client := newServer(t, outer(bd.mw(http.HandlerFunc(handler))))
	_, first, _ := send(t, client, "POST", srv.URL+"/x", "k", `{}`)
	_, replay, body := send(t, client, "POST", srv.URL+"/x", "k", `{}`)
	if first.Get("Content-Type") != want.Get("Content-Type") || replay.Get("Content-Type") != want.Get("Content-Type") ||
		replay.Get(ReplayedHeader) != "true" || body != "<html><body>hi</body></html>" {
		t.Fatalf("net/http alone %q; guarded %q, replay %q (replayed %q, %q)",
			want.Get("Content-Type"), first.Get("Content-Type"), replay.Get("Content-Type"), replay.Get(ReplayedHeader), body)
	}
}
