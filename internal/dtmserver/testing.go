package dtmserver

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// buildTimeout bounds StartT's build of the server (a cold build takes minutes on two cores).
const buildTimeout = 15 * time.Minute

// StartT builds (when needed) and starts a DTM server for t and stops it when t ends. The server's log is
// kept and printed when t fails; build progress goes to t.Log.
//
// When the server cannot be built or started, StartT fails t if IDEMKIT_REQUIRE_SERVICES=1 and skips it,
// saying why, otherwise.
func StartT(t testing.TB) *Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	logs := &syncBuffer{}
	s, err := Start(ctx, &Options{BuildProgress: tLogWriter{t}, Log: logs})
	if err != nil {
		if os.Getenv("IDEMKIT_REQUIRE_SERVICES") == "1" {
			t.Fatalf("DTM server unavailable (IDEMKIT_REQUIRE_SERVICES=1): %v", err)
		}
		t.Skipf("DTM server unavailable, skipping: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("stopping DTM server: %v", err)
		}
		if t.Failed() {
			t.Logf("DTM server log (%s):\n%s", s.URL(), logs.tail(64<<10))
		}
	})
	return s
}

// tLogWriter writes lines to t.Log.
type tLogWriter struct{ t testing.TB }

func (w tLogWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// syncBuffer is a goroutine-safe buffer that keeps at most its last 1 MiB.
type syncBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if len(b.buf) > 1<<20 {
		b.buf = append([]byte(nil), b.buf[len(b.buf)-1<<19:]...)
	}
	return len(p), nil
}

func (b *syncBuffer) tail(n int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.buf) > n {
		return string(b.buf[len(b.buf)-n:])
	}
	return string(b.buf)
}

// Shared is one DTM server for all the tests of a package: started by the first Get, stopped by Stop
// (call it from TestMain after m.Run). The zero value is ready to use; Env adds environment variables
// to the server's.
type Shared struct {
	Env []string

	once sync.Once
	srv  *Server
	err  error
	logs syncBuffer
}

// Get returns the shared server, starting it on first use. When it cannot be built or started, Get
// fails t if IDEMKIT_REQUIRE_SERVICES=1 and skips it, saying why, otherwise. The server's log is
// printed when t fails.
func (s *Shared) Get(t testing.TB) *Server {
	t.Helper()
	s.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
		defer cancel()
		s.srv, s.err = Start(ctx, &Options{Log: &s.logs, Env: s.Env})
	})
	if s.err != nil {
		if os.Getenv("IDEMKIT_REQUIRE_SERVICES") == "1" {
			t.Fatalf("DTM server unavailable (IDEMKIT_REQUIRE_SERVICES=1): %v", s.err)
		}
		t.Skipf("DTM server unavailable, skipping: %v", s.err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("DTM server log (tail):\n%s", s.logs.tail(16<<10))
		}
	})
	return s.srv
}

// Stop stops the server if Get started one.
func (s *Shared) Stop() error {
	if s.srv == nil {
		return nil
	}
	return s.srv.Stop()
}
