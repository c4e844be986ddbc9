//go:build unix

package chaos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// procKillWait bounds how long a process may take to exit after SIGKILL.
const procKillWait = 10 * time.Second

// proc is a child process in its own process group, so that one signal reaches everything it
// started. Its methods are safe for concurrent use.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{} // closed once cmd has been waited for
	err  error         // cmd.Wait's error, valid after done

	mu       sync.Mutex
	expected bool // the harness stopped it: its exit is not a failure
}

// procSet tracks every process a run starts, so that one deferred call stops them all, on success,
// failure or cancellation alike.
type procSet struct {
	mu    sync.Mutex
	procs map[*proc]struct{}
}

func newProcSet() *procSet { return &procSet{procs: make(map[*proc]struct{})} }

// start starts cmd in a new process group that dies with this process (Pdeathsig) and tracks it.
// A credential set on cmd.SysProcAttr is kept (the process runs as that user).
func (s *procSet) start(name string, cmd *exec.Cmd) (*proc, error) {
	attr := sysProcAttr()
	if cmd.SysProcAttr != nil {
		attr.Credential = cmd.SysProcAttr.Credential
	}
	cmd.SysProcAttr = attr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	s.mu.Lock()
	s.procs[p] = struct{}{}
	s.mu.Unlock()
	return p, nil
}

// forget stops tracking p (it has exited).
func (s *procSet) forget(p *proc) {
	s.mu.Lock()
	delete(s.procs, p)
	s.mu.Unlock()
}

// killAll SIGKILLs the process group of every tracked process and waits for each (bounded).
func (s *procSet) killAll() {
	s.mu.Lock()
	ps := make([]*proc, 0, len(s.procs))
	for p := range s.procs {
		ps = append(ps, p)
	}
	s.procs = make(map[*proc]struct{})
	s.mu.Unlock()
	for _, p := range ps {
		p.kill()
	}
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// exited reports whether the process has exited.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signal sends sig to the process group.
func (p *proc) signal(sig syscall.Signal) error {
	if p.exited() {
		return errors.New(p.name + " has exited")
	}
	return syscall.Kill(-p.pid(), sig)
}

// markExpected records that the harness is stopping p on purpose.
func (p *proc) markExpected() {
	p.mu.Lock()
	p.expected = true
	p.mu.Unlock()
}

func (p *proc) isExpected() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.expected
}

// kill SIGKILLs the process group (a stopped process dies too) and waits for the exit, bounded.
func (p *proc) kill() {
	p.markExpected()
	_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(procKillWait):
	}
}

// stop sends sig to the group and waits up to grace for the exit, then kills it. It returns the
// process's exit error (nil for a clean exit).
func (p *proc) stop(sig syscall.Signal, grace time.Duration) error {
	p.markExpected()
	_ = syscall.Kill(-p.pid(), sig)
	select {
	case <-p.done:
		return p.err
	case <-time.After(grace):
	}
	p.kill()
	return fmt.Errorf("%s did not exit within %s of %s; killed", p.name, grace, sig)
}

// wait waits for the exit until ctx is done.
func (p *proc) wait(ctx context.Context) error {
	select {
	case <-p.done:
		return p.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// tailFile returns the last n bytes of the file at path, for error messages.
func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
