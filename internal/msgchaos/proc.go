//go:build unix

package msgchaos

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// consumer is a consumer process: this executable in worker mode, in its own process group.
type consumer struct {
	name  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan struct{} // closed once the process was waited for
	lines chan string   // its stdout, line by line; closed at EOF
	log   *os.File

	mu      sync.Mutex
	stopped bool
}

// startConsumer starts bin as a consumer process with env, its stderr appended to logPath.
func startConsumer(name, bin string, env []string, logPath string) (*consumer, error) {
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = sysProcAttr()
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd.Stderr = lf
	stdin, err := cmd.StdinPipe()
	if err != nil {
		lf.Close()
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		lf.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	c := &consumer{name: name, cmd: cmd, stdin: stdin, done: make(chan struct{}), lines: make(chan string, 1024), log: lf}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
	}()
	go func() {
		_ = cmd.Wait()
		lf.Close()
		close(c.done)
	}()
	return c, nil
}

func (c *consumer) send(line string) error {
	_, err := io.WriteString(c.stdin, line+"\n")
	return err
}

// kill SIGKILLs the process group and waits for the exit (bounded).
func (c *consumer) kill() {
	c.mu.Lock()
	c.stopped = true
	c.mu.Unlock()
	_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
	}
}

// stop closes the process's stdin (it stops consuming and exits) and kills it after grace.
func (c *consumer) stop(grace time.Duration) bool {
	c.mu.Lock()
	c.stopped = true
	c.mu.Unlock()
	_ = c.stdin.Close()
	select {
	case <-c.done:
		return true
	case <-time.After(grace):
		c.kill()
		return false
	}
}

func (c *consumer) exitedOnItsOwn() bool {
	select {
	case <-c.done:
		c.mu.Lock()
		defer c.mu.Unlock()
		return !c.stopped
	default:
		return false
	}
}
