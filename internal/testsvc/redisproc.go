package testsvc

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisStartTimeout bounds how long StartRedis and Restart wait for a server to answer PING.
const redisStartTimeout = 10 * time.Second

// RedisProc is a private redis-server started by [StartRedis], for tests that stop, restart or
// otherwise break Redis without disturbing the shared one. It listens on 127.0.0.1 only, keeps no
// data on disk (no RDB, no AOF) and is killed when the test ends. Its methods are safe for
// concurrent use but are meant to be called from the test's goroutine.
type RedisProc struct {
	t    testing.TB
	addr string
	dir  string
	args []string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has been waited for
	log  *os.File
	runs int
}

// StartRedis starts a redis-server found on PATH on a free loopback port, with its working directory
// in t.TempDir() and extra command-line arguments args (for example "--cluster-enabled", "yes"),
// and waits (at most 10s) until it answers PING. It fails t when redis-server is missing or does not
// start, and kills the server on t.Cleanup.
func StartRedis(t testing.TB, args ...string) *RedisProc {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		Unavailable(t, "redis-server binary", err)
	}
	p := &RedisProc{t: t, dir: t.TempDir(), args: args}
	t.Cleanup(p.Stop)
	// The port is free when we pick it but may be taken before redis-server binds it: try again.
	var lastErr error
	for range 3 {
		port, err := freePort()
		if err != nil {
			t.Fatalf("testsvc: finding a free port: %v", err)
		}
		p.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		if lastErr = p.start(bin); lastErr == nil {
			return p
		}
	}
	t.Fatalf("testsvc: starting redis-server: %v", lastErr)
	return nil
}

// Addr returns the server's address, host:port; it stays the same across Restart.
func (p *RedisProc) Addr() string { return p.addr }

// Options returns client options for the server with ContextTimeoutEnabled set.
func (p *RedisProc) Options() *redis.Options {
	return &redis.Options{Addr: p.addr, ContextTimeoutEnabled: true, DialTimeout: 2 * time.Second}
}

// Stop kills the server and waits for it to exit. Stopping a stopped server does nothing.
func (p *RedisProc) Stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stopLocked()
}

// Restart stops the server if it runs and starts a new one on the same port, with no data: every key
// is gone. It fails the test when the server does not come back.
func (p *RedisProc) Restart() {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stopLocked()
	bin, err := exec.LookPath("redis-server")
	if err == nil {
		err = p.startLocked(bin)
	}
	if err != nil {
		p.t.Fatalf("testsvc: restarting redis-server on %s: %v", p.addr, err)
	}
}

func (p *RedisProc) start(bin string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.startLocked(bin)
}

func (p *RedisProc) startLocked(bin string) error {
	_, port, _ := net.SplitHostPort(p.addr)
	p.runs++
	// A fresh directory per run: a cluster node must not find the previous run's nodes.conf.
	dir := filepath.Join(p.dir, strconv.Itoa(p.runs))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	logf, err := os.Create(filepath.Join(dir, "redis.log"))
	if err != nil {
		return err
	}
	args := append([]string{
		"--port", port, "--bind", "127.0.0.1", "--dir", dir,
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--protected-mode", "yes",
	}, p.args...)
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	p.cmd, p.done, p.log = cmd, done, logf
	if err := waitRedis(p.addr, done); err != nil {
		p.stopLocked()
		return fmt.Errorf("%w; log:\n%s", err, tail(filepath.Join(dir, "redis.log")))
	}
	return nil
}

func (p *RedisProc) stopLocked() {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	select {
	case <-p.done:
	case <-time.After(redisStartTimeout):
		p.t.Errorf("testsvc: redis-server pid %d did not exit after SIGKILL", p.cmd.Process.Pid)
	}
	_ = p.log.Close()
	p.cmd, p.done, p.log = nil, nil, nil
}

// waitRedis waits until the server at addr answers PING, the process exits, or the start timeout
// passes.
func waitRedis(addr string, exited <-chan struct{}) error {
	deadline := time.Now().Add(redisStartTimeout)
	var lastErr error
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return errors.New("redis-server exited during start")
		default:
		}
		if lastErr = PingRedis(addr); lastErr == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("redis-server on %s did not answer PING within %s: %w", addr, redisStartTimeout, lastErr)
}

// PingRedis sends PING to the Redis server at addr over a fresh connection (1s timeouts) and checks
// the answer: a probe that needs no client library.
func PingRedis(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// tail returns the last lines of the file at path, for failure messages.
func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if i := len(b) - 2000; i > 0 {
		b = b[i:]
		if j := bytes.IndexByte(b, '\n'); j >= 0 {
			b = b[j+1:]
		}
	}
	return string(b)
}
