//go:build unix

package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// killWait bounds how long a process may take to exit after SIGKILL.
const killWait = 10 * time.Second

// process is a child process in its own process group, so that one signal reaches everything it
// started (a mariadbd's SST scripts and rsync daemon, for instance). Its methods are safe for
// concurrent use.
type process struct {
	name string
	cmd  *exec.Cmd
	done chan struct{} // closed once cmd has been waited for
	err  error         // cmd.Wait's error, valid after done
	// guard is the write end of the pipe a reaper wrapper reads (see reaped); closing it, or this
	// process dying, makes the wrapper kill the real server.
	guard *os.File
}

// startProcess starts cmd in a new process group that the kernel kills with this process
// (Pdeathsig). Its output goes to out.
func startProcess(name string, cmd *exec.Cmd, out io.Writer) (*process, error) {
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("cluster: starting %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// reaperScript runs "$@" in the background and kills it when its standard input (a pipe from this
// process) reaches end of file, which happens when this process dies, even by SIGKILL. It exists for
// servers that change their user at start (mariadbd --user=mysql): the kernel clears the parent-death
// signal of a process whose credentials change, so Pdeathsig alone would leave them running.
const reaperScript = `exec 3<&0
"$@" </dev/null &
c=$!
{ read -r _ <&3; kill -9 "$c" 2>/dev/null; } &
w=$!
wait "$c"
s=$?
kill "$w" 2>/dev/null
exit "$s"`

// startReaped starts bin with args under the reaper wrapper (see reaperScript), in its own process
// group.
func startReaped(name, bin string, args []string, env []string, out io.Writer) (*process, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	cmd := exec.Command("/bin/sh", append([]string{"-c", reaperScript, "sh", bin}, args...)...)
	cmd.Stdin = r
	cmd.Env = env
	p, err := startProcess(name, cmd, out)
	_ = r.Close()
	if err != nil {
		_ = w.Close()
		return nil, err
	}
	p.guard = w
	return p, nil
}

func (p *process) pid() int { return p.cmd.Process.Pid }

// exited reports whether the process has exited.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill SIGKILLs the whole process group and waits (bounded) for the exit.
func (p *process) kill() error {
	_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
	if p.guard != nil {
		_ = p.guard.Close()
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(killWait):
		return fmt.Errorf("cluster: %s (pid %d) did not exit within %s of SIGKILL", p.name, p.pid(), killWait)
	}
}

// freePorts returns n distinct loopback ports that were free a moment ago. Holding every listener
// until all are chosen keeps them distinct; another process may still take one before its server
// binds it, which the starters handle by trying again.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	ls := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("cluster: finding a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// tailFile returns the last n bytes of the file at path, from a line start, for error messages.
func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	if len(b) > n {
		b = b[len(b)-n:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return string(b)
}

// lockedBuffer is an io.Writer safe for concurrent use that keeps the last max bytes.
type lockedBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.max; b.max > 0 && over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return len(p), nil
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

// errNotReady is wrapped by the wait loops' errors while a server is not answering yet.
var errNotReady = errors.New("not ready")
