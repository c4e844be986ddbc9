//go:build unix

package chaos

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/idemkit/idemkit/internal/testsvc"
)

// redisStartTimeout bounds how long a private redis-server may take to answer PING.
const redisStartTimeout = 20 * time.Second

// redisServer is a private redis-server on a free loopback port, without persistence: a restart
// comes back empty. Its methods are safe for concurrent use.
type redisServer struct {
	procs *procSet
	dir   string
	bin   string
	addr  string

	mu   sync.Mutex
	p    *proc
	runs int
}

// RedisAvailable reports whether redis-server is installed, and if not, why.
func RedisAvailable() error {
	_, err := findBinary("redis-server")
	return err
}

func startRedis(ctx context.Context, procs *procSet, dir string) (*redisServer, error) {
	bin, err := findBinary("redis-server")
	if err != nil {
		return nil, err
	}
	r := &redisServer{procs: procs, dir: dir, bin: bin}
	var lastErr error
	for range 3 {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		r.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		if lastErr = r.start(ctx); lastErr == nil {
			return r, nil
		}
	}
	return nil, lastErr
}

func (r *redisServer) start(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.startLocked(ctx)
}

func (r *redisServer) startLocked(ctx context.Context) error {
	r.runs++
	dir := filepath.Join(r.dir, strconv.Itoa(r.runs)) // a fresh, empty directory per run
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	_, port, _ := net.SplitHostPort(r.addr)
	logPath := filepath.Join(dir, "redis.log")
	cmd := exec.Command(r.bin, "--port", port, "--bind", "127.0.0.1", "--dir", dir, "--save", "",
		"--appendonly", "no", "--daemonize", "no", "--protected-mode", "yes", "--logfile", logPath)
	p, err := r.procs.start("redis-server", cmd)
	if err != nil {
		return err
	}
	r.p = p
	deadline := time.Now().Add(redisStartTimeout)
	for {
		if p.exited() {
			err = fmt.Errorf("exited during start: %v", p.err)
			break
		}
		if err = testsvc.PingRedis(r.addr); err == nil {
			return nil
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.kill()
	r.procs.forget(p)
	r.p = nil
	return fmt.Errorf("redis-server on %s: %w\n%s", r.addr, err, tailFile(logPath, 2000))
}

// Restart SIGKILLs the server, keeps it down for down and starts an empty one on the same port.
func (r *redisServer) Restart(ctx context.Context, down time.Duration) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.p != nil {
		r.p.kill()
		r.procs.forget(r.p)
		r.p = nil
	}
	select {
	case <-time.After(down):
	case <-ctx.Done():
	}
	return r.startLocked(context.WithoutCancel(ctx))
}

// Stop kills the server.
func (r *redisServer) Stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.p != nil {
		r.p.kill()
		r.procs.forget(r.p)
		r.p = nil
	}
}
