package httpx

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/memory"
)

// benchWriter is a ResponseWriter that discards the body, so the benchmarks measure the middleware.
type benchWriter struct {
	h      http.Header
	status int
}

func (w *benchWriter) Header() http.Header         { return w.h }
func (w *benchWriter) WriteHeader(s int)           { w.status = s }
func (w *benchWriter) Write(p []byte) (int, error) { return len(p), nil }

var benchBody = `{"item":"book","qty":1,"address":{"city":"Lyon","zip":"69001"}}`

func benchHandler(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_, _ = io.WriteString(w, `{"id":"ord_1","status":"created"}`)
}

// benchRun serves b.N requests through the handler newHandler returns, with key(i) as the
// Idempotency-Key. With fresh set, a new handler (new memory backends) is made every fresh
// requests outside the timer, so the new-key runs measure the middleware, not the garbage
// collector walking an ever-growing in-memory store.
func benchRun(b *testing.B, newHandler func() http.Handler, key func(i int) string, fresh int) {
	b.Helper()
	r, _ := http.NewRequest(http.MethodPost, "/orders", nil)
	r.Header.Set("Content-Type", "application/json")
	w := &benchWriter{h: make(http.Header)}
	body := strings.NewReader(benchBody)
	h := newHandler()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if fresh > 0 && i > 0 && i%fresh == 0 {
			b.StopTimer()
			h = newHandler()
			b.StartTimer()
		}
		body.Reset(benchBody)
		r.Body = io.NopCloser(body)
		r.ContentLength = int64(len(benchBody))
		if k := key(i); k != "" {
			r.Header.Set(DefaultHeader, k)
		}
		clear(w.h)
		h.ServeHTTP(w, r)
		if w.status != http.StatusCreated {
			b.Fatalf("status %d", w.status)
		}
	}
}

func benchGuarded(b *testing.B, opts *Options) func() http.Handler {
	b.Helper()
	return func() http.Handler {
		guard, err := idemkit.New(memory.NewStore(), &idemkit.Options{Locker: memory.NewLocker(nil)})
		if err != nil {
			b.Fatal(err)
		}
		return Middleware(guard, opts)(http.HandlerFunc(benchHandler))
	}
}

// BenchmarkMiddleware compares the bare handler with the guarded one on memory backends: a new key
// every request (claim, run, finish, cache fill) and a replay of one key (cache hit).
func BenchmarkMiddleware(b *testing.B) {
	const fresh = 4096
	keys := make([]string, fresh)
	for i := range keys {
		keys[i] = "key-" + strconv.Itoa(i)
	}
	newKey := func(i int) string { return keys[i%fresh] }
	b.Run("bare", func(b *testing.B) {
		benchRun(b, func() http.Handler { return http.HandlerFunc(benchHandler) }, func(int) string { return "" }, 0)
	})
	b.Run("new-key", func(b *testing.B) { benchRun(b, benchGuarded(b, nil), newKey, fresh) })
	b.Run("new-key-no-fingerprint", func(b *testing.B) {
		benchRun(b, benchGuarded(b, &Options{NoFingerprint: true}), newKey, fresh)
	})
	b.Run("replay", func(b *testing.B) { benchRun(b, benchGuarded(b, nil), func(int) string { return "same-key" }, 0) })
	b.Run("passthrough-GET", func(b *testing.B) {
		h := benchGuarded(b, nil)()
		benchRun(b, func() http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { r.Method = http.MethodGet; h.ServeHTTP(w, r) })
		}, func(int) string { return "" }, 0)
	})
}

// BenchmarkFingerprint measures the canonical JSON fingerprint of the benchmark body.
func BenchmarkFingerprint(b *testing.B) {
	cfg, _ := (*Options)(nil).withDefaults()
	r, _ := http.NewRequest(http.MethodPost, "/orders", nil)
	r.Header.Set("Content-Type", "application/json")
	body := []byte(benchBody)
	st := &reqState{cfg: cfg, body: body, bodyDone: true}
	b.ReportAllocs()
	for b.Loop() {
		st.canonDone = false // no cached canonical form: measure it
		if _, err := fingerprint(r, "POST /orders", body, st); err != nil {
			b.Fatal(err)
		}
	}
}
