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
