package httpx

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/memory"
	"github.com/idemkit/idemkit/record"
)

// backend makes the Store and Locker a test runs on.
type backend struct {
	name string
	new  func(t *testing.T) (idemkit.Store, idemkit.Locker)
}

var memoryBackend = backend{"memory", func(t *testing.T) (idemkit.Store, idemkit.Locker) {
	return memory.NewStore(), memory.NewLocker(nil)
}}

// realBackend is Redis (package lock) in front of MariaDB (package record), each test on its own
// table and key prefix, both removed when the test ends.
var realBackend = backend{"redis+mariadb", func(t *testing.T) (idemkit.Store, idemkit.Locker) {
	t.Helper()
	rdb := testsvc.Redis(t)
	db := testsvc.MySQL(t, nil)
	table := testsvc.Name("t_httpx_")
	st, err := record.New(db, &record.Options{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	testsvc.DropTable(t, db, table)
	if err := st.CreateTable(context.Background()); err != nil {
		t.Fatal(err)
	}
	prefix := testsvc.Name("httpx_") + ":"
	testsvc.CleanRedis(t, rdb, prefix)
	return st, lock.New(rdb, &lock.Options{Prefix: prefix})
}}

// backends are the backends every behaviour test runs on.
func backends() []backend { return []backend{memoryBackend, realBackend} }

// flakyStore fails every call while fail is set, and Update alone while failUpdate is.
type flakyStore struct {
	idemkit.Store
	fail, failUpdate atomic.Bool
}

var errInjected = errors.New("injected failure")

func (s *flakyStore) Insert(ctx context.Context, r *idemkit.Record) error {
	if s.fail.Load() {
		return errInjected
	}
	return s.Store.Insert(ctx, r)
}

func (s *flakyStore) Get(ctx context.Context, scope, key string) (*idemkit.Record, error) {
	if s.fail.Load() {
		return nil, errInjected
	}
	return s.Store.Get(ctx, scope, key)
}

func (s *flakyStore) Update(ctx context.Context, r *idemkit.Record, prev idemkit.Version) error {
	if s.fail.Load() || s.failUpdate.Load() {
		return errInjected
	}
	return s.Store.Update(ctx, r, prev)
}

// flakyLocker fails Acquire while fail is set.
type flakyLocker struct {
	idemkit.Locker
	fail atomic.Bool
}

func (l *flakyLocker) Acquire(ctx context.Context, key, token string, ttl time.Duration) ([]byte, error) {
	if l.fail.Load() {
		return nil, errInjected
	}
	return l.Locker.Acquire(ctx, key, token, ttl)
}

// bundle is a guarded test handler and what the tests look at.
type bundle struct {
	t       *testing.T
	guard   *idemkit.Guard
	store   *flakyStore
	locker  *flakyLocker
	mw      func(http.Handler) http.Handler // the middleware, for tests that build their own router
	handler http.Handler                    // mw around serve
	calls   atomic.Int64
	// entered receives once per blocking call (X-Test-Block); release lets them all finish.
	entered     chan struct{}
	release     chan struct{}
	releaseOnce sync.Once
}

// setup guards testHandler with the middleware on backend b. gopts may be nil.
func setup(t *testing.T, b backend, opts *Options, gopts *idemkit.Options) *bundle {
	t.Helper()
	st, lk := b.new(t)
	bd := &bundle{t: t, store: &flakyStore{Store: st}, locker: &flakyLocker{Locker: lk},
		entered: make(chan struct{}, 100), release: make(chan struct{})}
	var g idemkit.Options
	if gopts != nil {
		g = *gopts
	}
	g.Locker = bd.locker
	guard, err := idemkit.New(bd.store, &g)
	if err != nil {
		t.Fatal(err)
	}
	bd.guard = guard
	bd.mw = Middleware(guard, opts)
	bd.handler = bd.mw(http.HandlerFunc(bd.serve))
	t.Cleanup(bd.unblock)
	return bd
}

func (bd *bundle) unblock() { bd.releaseOnce.Do(func() { close(bd.release) }) }

// serve is the handler under test. It answers X-Test-Status (default 201) with JSON holding its
// call number and the body it read, sets replayable and non-replayable headers, blocks on
// X-Test-Block until released, panics on X-Test-Panic, and writes X-Test-Size bytes when asked.
func (bd *bundle) serve(w http.ResponseWriter, r *http.Request) {
	n := bd.calls.Add(1)
	body, _ := io.ReadAll(r.Body)
	if r.Header.Get("X-Test-Block") != "" {
		bd.entered <- struct{}{}
		<-bd.release
	}
	if v := r.Header.Get("X-Test-Panic"); v != "" {
		panic(v)
	}
	status := 201
	if s := r.Header.Get("X-Test-Status"); s != "" {
		status, _ = strconv.Atoi(s)
	}
	fence, _ := idemkit.FenceFromContext(r.Context())
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Location", "/orders/"+strconv.FormatInt(n, 10))
	h.Set("Set-Cookie", "session=secret")
	h.Set("X-Internal", "not replayed")
	w.WriteHeader(status)
	if s := r.Header.Get("X-Test-Size"); s != "" {
		size, _ := strconv.Atoi(s)
		_, _ = w.Write([]byte(strings.Repeat("x", size)))
		return
	}
	if len(body) == 0 {
		body = []byte("null")
	}
	_, _ = fmt.Fprintf(w, `{"call":%d,"fence":%d,"got":%s}`, n, fence, body)
}

// req builds a request; key "" sends no Idempotency-Key; hdr are name, value pairs.
func req(method, path, key, body string, hdr ...string) *http.Request {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	r := httptest.NewRequest(method, path, rd)
	if body != "" {
		r.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		r.Header.Set("Idempotency-Key", key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Add(hdr[i], hdr[i+1])
	}
	return r
}

func (bd *bundle) do(r *http.Request) *httptest.ResponseRecorder {
	bd.t.Helper()
	rec := httptest.NewRecorder()
	bd.handler.ServeHTTP(rec, r)
	return rec
}

// problemType returns the problem type name of a problem+json response, or "".
func problemType(rec *httptest.ResponseRecorder) string {
	if rec.Header().Get("Content-Type") != "application/problem+json" {
		return ""
	}
	var p struct{ Type string }
	if err := jsonUnmarshal(rec.Body.Bytes(), &p); err != nil {
		return "unparsable"
	}
	return strings.TrimPrefix(p.Type, DefaultProblemBase)
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// logSink collects log messages.
type logSink struct {
	mu   sync.Mutex
	msgs []string
}

func (l *logSink) Enabled(context.Context, slog.Level) bool { return true }
func (l *logSink) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	msg := r.Level.String() + " " + r.Message
	r.Attrs(func(a slog.Attr) bool { msg += " " + a.String(); return true })
	l.msgs = append(l.msgs, msg)
	return nil
}
func (l *logSink) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logSink) WithGroup(string) slog.Handler      { return l }

// has reports whether a message containing each of parts was logged.
func (l *logSink) has(parts ...string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
next:
	for _, m := range l.msgs {
		for _, p := range parts {
			if !strings.Contains(m, p) {
				continue next
			}
		}
		return true
	}
	return false
}
