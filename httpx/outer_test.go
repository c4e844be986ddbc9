package httpx

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	chimw "github.com/go-chi/chi/v5/middleware"
	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/memory"
)

// rawResponse is a response as it reached the client, before any decoding.
type rawResponse struct {
	status int
	header http.Header
	body   []byte
}

// rawClient talks to srv without transparent decompression, so tests see what went on the wire.
func rawClient(t *testing.T, srv *httptest.Server) func(key, acceptEncoding string) rawResponse {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}, Timeout: 30 * time.Second}
	t.Cleanup(client.CloseIdleConnections)
	return func(key, acceptEncoding string) rawResponse {
		t.Helper()
		r, err := http.NewRequest(http.MethodPost, srv.URL+"/orders", strings.NewReader(`{"item":"book"}`))
		if err != nil {
			t.Fatal(err)
		}
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set(DefaultHeader, key)
		if acceptEncoding != "" {
			r.Header.Set("Accept-Encoding", acceptEncoding)
		}
		resp, err := client.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("reading the body: %v (Content-Length %q, Content-Encoding %q)", err,
				resp.Header.Get("Content-Length"), resp.Header.Values("Content-Encoding"))
		}
		return rawResponse{resp.StatusCode, resp.Header, body}
	}
}

// decoded returns the body with its Content-Encoding undone.
func (r rawResponse) decoded(t *testing.T) string {
	t.Helper()
	switch ce := r.header.Values("Content-Encoding"); {
	case len(ce) == 0:
		return string(r.body)
	case len(ce) == 1 && ce[0] == "gzip":
		zr, err := gzip.NewReader(bytes.NewReader(r.body))
		if err != nil {
			t.Fatalf("Content-Encoding gzip, body not gzip: %v", err)
		}
		b, err := io.ReadAll(zr)
		if err != nil {
			t.Fatalf("Content-Encoding gzip, body not gzip: %v", err)
		}
		return string(b)
	default:
		t.Fatalf("Content-Encoding %q", ce)
		return ""
	}
}

// sameForClient fails unless replay is first as the client sees it: status, body bytes, and every
// header field with the same values, apart from Date, Idempotent-Replayed and the fields in also;
// and no field carries a value twice.
func sameForClient(t *testing.T, first, replay rawResponse, also ...string) {
	t.Helper()
	if replay.header.Get(ReplayedHeader) != "true" {
		t.Fatalf("not a replay: %d %v %q", replay.status, replay.header, replay.body)
	}
	if replay.status != first.status || !bytes.Equal(replay.body, first.body) {
		t.Errorf("replay %d %q, first %d %q", replay.status, replay.body, first.status, first.body)
	}
	skip := append([]string{"Date", ReplayedHeader}, also...)
	for _, resp := range []rawResponse{first, replay} {
		for name, vals := range resp.header {
			for i, v := range vals {
				if slices.Contains(vals[:i], v) {
					t.Errorf("%s carries %q twice: %q", name, v, vals)
				}
			}
		}
	}
	for name, vals := range first.header {
		if !slices.Contains(skip, name) && !slices.Equal(vals, replay.header[name]) {
			t.Errorf("%s: first %q, replay %q", name, vals, replay.header[name])
		}
	}
	for name, vals := range replay.header {
		if _, ok := first.header[name]; !ok && !slices.Contains(skip, name) {
			t.Errorf("replay adds %s %q", name, vals)
		}
	}
}

// orderHandler sets its own headers: adds to a Vary outer middleware set, replaces the
// Cache-Control chi's NoCache set, and writes a compressible JSON body.
func orderHandler(calls *int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		*calls++
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("Location", "/orders/1")
		h.Add("Vary", "Accept-Language")
		h.Set("Cache-Control", "private, max-age=60")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"order":1,"item":"book","note":"`+strings.Repeat("compressible ", 20)+`"}`)
	}
}

// eagerGzip is the compression wrapper found in many codebases: it decides before the handler runs
// and sets Content-Encoding and Vary up front.
func eagerGzip(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			next.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Content-Encoding", "gzip")
		w.Header().Add("Vary", "Accept-Encoding")
		zw := gzip.NewWriter(w)
		defer zw.Close()
		next.ServeHTTP(gzipWriter{w, zw}, r)
	})
}

type gzipWriter struct {
	http.ResponseWriter
	zw *gzip.Writer
}

func (g gzipWriter) Write(p []byte) (int, error) { return g.zw.Write(p) }

// TestReplayBehindOuterMiddleware is issue 11 item 15: headers that middleware wrapped outside the
// idempotency middleware set (compression, NoCache, CORS-like Vary) are theirs; a replay through
// the same stack must reach the client exactly as the first response did, with no field doubled
// and no stale Content-Encoding or Content-Length.
func TestReplayBehindOuterMiddleware(t *testing.T) {
	outer := chimw.SetHeader("Vary", "Origin")
	stacks := []struct {
		name string
		wrap func(http.Handler) http.Handler // the middleware outside httpx
	}{
		{"chi Compress, NoCache, Vary", func(h http.Handler) http.Handler {
			return chimw.Compress(5)(chimw.NoCache(outer(h)))
		}},
		{"eager gzip wrapper, NoCache, Vary", func(h http.Handler) http.Handler {
			return eagerGzip(chimw.NoCache(outer(h)))
		}},
	}
	for _, b := range backends() {
		for _, stack := range stacks {
			t.Run(b.name+"/"+stack.name, func(t *testing.T) {
				st, lk := b.new(t)
				guard, err := idemkit.New(st, &idemkit.Options{Locker: lk})
				if err != nil {
					t.Fatal(err)
				}
				calls := 0
				srv := httptest.NewServer(stack.wrap(Middleware(guard, nil)(orderHandler(&calls))))
				t.Cleanup(srv.Close)
				post := rawClient(t, srv)

				first := post("k-gzip", "gzip")
				if first.status != http.StatusCreated || first.header.Get("Content-Encoding") != "gzip" {
					t.Fatalf("first response %d %v: the stack did not compress", first.status, first.header)
				}
				want := first.decoded(t)
				sameForClient(t, first, post("k-gzip", "gzip"))

				// A replay to a client that does not accept gzip gets the body the handler wrote,
				// unencoded: the stored response carries no Content-Encoding.
				plain := post("k-gzip", "")
				if plain.header.Get(ReplayedHeader) != "true" || plain.header.Get("Content-Encoding") != "" || plain.decoded(t) != want {
					t.Errorf("replay without gzip: %d %v %q", plain.status, plain.header, plain.body)
				}

				// And the other way round: first identity, replays identity and gzip.
				firstPlain := post("k-plain", "")
				if firstPlain.header.Get("Content-Encoding") != "" {
					t.Fatalf("first response without Accept-Encoding is encoded: %v", firstPlain.header)
				}
				sameForClient(t, firstPlain, post("k-plain", ""))
				if z := post("k-plain", "gzip"); z.header.Get(ReplayedHeader) != "true" || z.decoded(t) != firstPlain.decoded(t) {
					t.Errorf("gzip replay of an identity first response: %v %q", z.header, z.body)
				}
				if calls != 2 {
					t.Errorf("handler ran %d times, want 2", calls)
				}
			})
		}
	}
}

// lateHeaders is middleware that sets its headers when the response starts, by WriteHeader, Write
// or Flush, as lazy compressors do.
func lateHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(&lateWriter{ResponseWriter: w}, r)
	})
}

type lateWriter struct {
	http.ResponseWriter
	started bool
}

func (l *lateWriter) start() {
	if !l.started {
		l.started = true
		l.Header().Add("Vary", "Accept-Encoding")
		l.Header().Set("Cache-Control", "no-transform")
	}
}

func (l *lateWriter) WriteHeader(code int) { l.start(); l.ResponseWriter.WriteHeader(code) }

func (l *lateWriter) Write(p []byte) (int, error) { l.start(); return l.ResponseWriter.Write(p) }

func (l *lateWriter) FlushError() error {
	l.start()
	return http.NewResponseController(l.ResponseWriter).Flush()
}

// TestReplayBehindFlushingMiddleware: a handler that flushes before it writes sends its headers
// with the flush; what outer middleware adds while flushing is not the handler's and is not stored.
func TestReplayBehindFlushingMiddleware(t *testing.T) {
	guard, err := idemkit.New(memory.NewStore(), nil)
	if err != nil {
		t.Fatal(err)
	}
	h := lateHeaders(Middleware(guard, nil)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Add("Vary", "Accept-Language")
		if err := http.NewResponseController(w).Flush(); err != nil {
			t.Errorf("flush: %v", err)
		}
		_, _ = io.WriteString(w, `{"order":1}`)
	})))
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	post := rawClient(t, srv)
	first := post("k", "")
	if first.status != 200 || string(first.body) != `{"order":1}` {
		t.Fatalf("first %d %v %q", first.status, first.header, first.body)
	}
	// The flushed first response is chunked, the replay has a Content-Length: framing, not content.
	sameForClient(t, first, post("k", ""), "Content-Length")
}

// TestHandlerEncodedBodyNotReplayed: Content-Encoding is never stored, so a body the handler encoded
// itself cannot be replayed faithfully; duplicates get 409 response-not-stored, never the encoded
// bytes without their encoding.
func TestHandlerEncodedBodyNotReplayed(t *testing.T) {
	guard, err := idemkit.New(memory.NewStore(), nil)
	if err != nil {
		t.Fatal(err)
	}
	h := Middleware(guard, nil)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Encoding", "gzip")
		zw := gzip.NewWriter(w)
		_, _ = io.WriteString(zw, `{"order":1}`)
		_ = zw.Close()
	}))
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	post := rawClient(t, srv)
	if first := post("k", "gzip"); first.status != 200 || first.decoded(t) != `{"order":1}` {
		t.Fatalf("first %d %v %q", first.status, first.header, first.body)
	}
	dup := post("k", "gzip")
	if dup.status != http.StatusConflict || !strings.Contains(string(dup.body), ProblemResponseNotStored) ||
		!strings.Contains(string(dup.body), "Content-Encoding") {
		t.Fatalf("duplicate %d %v %q", dup.status, dup.header, dup.body)
	}
}
