package dtmserver

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"time"
)

// Defaults for [Options].
const (
	// DefaultStartTimeout bounds the wait for the server's HTTP API to answer.
	DefaultStartTimeout = 30 * time.Second
	// DefaultStopTimeout is how long Stop waits after SIGINT before it sends SIGKILL.
	DefaultStopTimeout = 5 * time.Second
	// DefaultCronInterval is the server's TransCronInterval in seconds: how often it looks for global
	// transactions due for a retry. DTM's own default is 3.
	DefaultCronInterval = 1
	// startAttempts is how often Start picks new ports when the server cannot bind the ones it chose.
	startAttempts = 3
)

// Options configure [Start]. The zero value works.
type Options struct {
	// Binary is the DTM server executable. Defaults to the result of [Build] (which reports its progress
	// to BuildProgress).
	Binary string
	// BuildProgress receives Build's progress lines when Binary is empty. Defaults to discarding them.
	BuildProgress io.Writer
	// Log receives the server's stdout and stderr. Defaults to discarding them.
	Log io.Writer
	// StartTimeout bounds the wait for the HTTP API (ctx may end it sooner). Defaults to
	// DefaultStartTimeout.
	StartTimeout time.Duration
	// StopTimeout is the grace period between SIGINT and SIGKILL in Stop. Defaults to DefaultStopTimeout.
	StopTimeout time.Duration
	// CronInterval is the server's TRANS_CRON_INTERVAL in seconds. Defaults to DefaultCronInterval.
	CronInterval int
	// Dir is the server's working directory, where its boltdb store (dtm.bolt) lives. It is created
	// when missing and kept by Stop, so a server started again on the same Dir — after a Stop, a crash
	// or a SIGKILL of the process that started it — resumes the transactions it had. Two servers must
	// not share a Dir (the second fails to start: boltdb locks its file). Defaults to a fresh
	// temporary directory, removed by Stop: the transactions die with the server.
	Dir string
	// Env holds extra KEY=VALUE settings for the server (DTM reads its whole configuration from the
	// environment: RETRY_INTERVAL, TIMEOUT_TO_FAIL, LOG_LEVEL, ...). They override Start's own settings.
	Env []string
	// MySQL, when set, keeps the server's transactions in a MySQL/MariaDB database instead of the
	// boltdb file, so that several servers can share them (see [MySQLStore]). Defaults to nil: boltdb.
	MySQL *MySQLStore
}

// Server is a running DTM server child process. Its methods are safe for concurrent use.
type Server struct {
	cmd      *exec.Cmd
	dir      string
	keepDir  bool // Options.Dir: not removed by Stop
	httpPort int
	grpcPort int
	base     string
	stopWait time.Duration
	exited   chan struct{} // closed when the process has exited
	waitErr  error         // set before exited is closed

	stopOnce sync.Once
	stopErr  error
}

// Start runs the DTM server as a child process and returns once its HTTP API answers.
//
// The server gets free ports for HTTP and gRPC (HTTP_PORT, GRPC_PORT; JSON_RPC_PORT too, although
// v1.19.0 serves JSON-RPC on the HTTP port), the boltdb store (STORE_DRIVER=boltdb, which writes ./dtm.bolt
// in its working directory: Options.Dir, kept, or a fresh temporary directory) or the MySQL store of
// Options.MySQL, logs on stderr (LOG_OUTPUTS=stderr) and no alert web hook or
// micro-service registry. DTM listens on all interfaces (":port"); callers use the loopback address
// returned by [Server.URL]. When the chosen ports are taken by the time the server binds them, Start tries
// again with new ones.
//
// Start returns an error when the binary cannot be built or run, or the server exits or does not answer
// within StartTimeout; it never leaves a process behind. Call [Server.Stop] when done.
func Start(ctx context.Context, opts *Options) (*Server, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	o.StartTimeout = cmp.Or(o.StartTimeout, DefaultStartTimeout)
	o.StopTimeout = cmp.Or(o.StopTimeout, DefaultStopTimeout)
	o.CronInterval = cmp.Or(o.CronInterval, DefaultCronInterval)
	if o.StartTimeout < 0 || o.StopTimeout < 0 || o.CronInterval < 0 {
		return nil, errors.New("dtmserver: negative timeout or interval")
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.Binary == "" {
		bin, err := Build(ctx, o.BuildProgress)
		if err != nil {
			return nil, err
		}
		o.Binary = bin
	}
	var lastErr error
	for range startAttempts {
		s, err, retry := start(ctx, &o)
		if err == nil {
			return s, nil
		}
		lastErr = err
		if !retry || ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

// start makes one attempt; retry reports whether the failure may be a port race.
func start(ctx context.Context, o *Options) (s *Server, err error, retry bool) {
	ports, err := freePorts(3)
	if err != nil {
		return nil, err, false
	}
	store := []string{"STORE_DRIVER=boltdb"}
	if o.MySQL != nil {
		if store, err = o.MySQL.env(); err != nil {
			return nil, err, false
		}
	}
	dir, keep := o.Dir, o.Dir != ""
	if keep {
		err = os.MkdirAll(dir, 0o755)
	} else {
		dir, err = os.MkdirTemp("", "idemkit-dtm-*")
	}
	if err != nil {
		return nil, fmt.Errorf("dtmserver: %w", err), false
	}
	s = &Server{
		dir:      dir,
		keepDir:  keep,
		httpPort: ports[0],
		grpcPort: ports[1],
		base:     "http://127.0.0.1:" + strconv.Itoa(ports[0]) + "/api/dtmsvr",
		stopWait: o.StopTimeout,
		exited:   make(chan struct{}),
	}
	cmd := exec.Command(o.Binary)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"HTTP_PORT="+strconv.Itoa(ports[0]),
		"GRPC_PORT="+strconv.Itoa(ports[1]),
		"JSON_RPC_PORT="+strconv.Itoa(ports[2]),
		"LOG_OUTPUTS=stderr",
		"LOG_ROTATION_ENABLE=0",
		"ALERT_WEB_HOOK=",
		"MICRO_SERVICE_DRIVER=default",
		"MICRO_SERVICE_TARGET=",
		"MICRO_SERVICE_END_POINT=",
		"HTTP_MICRO_SERVICE_DRIVER=default",
		"TIME_ZONE_OFFSET=",
		"TRANS_CRON_INTERVAL="+strconv.Itoa(o.CronInterval),
	)
	cmd.Env = append(cmd.Env, store...)
	cmd.Env = append(cmd.Env, o.Env...)
	logs := &tailWriter{w: o.Log}
	cmd.Stdout = logs
	cmd.Stderr = logs
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		if !keep {
			_ = os.RemoveAll(dir)
		}
		return nil, fmt.Errorf("dtmserver: starting %s: %w", o.Binary, err), false
	}
	s.cmd = cmd
	go func() {
		s.waitErr = cmd.Wait()
		close(s.exited)
	}()

	wctx, cancel := context.WithTimeout(ctx, o.StartTimeout)
	defer cancel()
	if err := s.waitReady(wctx); err != nil {
		_ = s.Stop()
		tail := logs.tail.String()
		select {
		case <-s.exited: // it died: most likely a port taken in between
			return nil, fmt.Errorf("dtmserver: server exited during start (%v): %w\n%s", s.waitErr, err, tail), true
		default:
		}
		return nil, fmt.Errorf("dtmserver: server did not answer on %s: %w\n%s", s.base, err, tail), false
	}
	return s, nil, false
}

// waitReady polls newGid until the API answers, the process exits or ctx ends.
func (s *Server) waitReady(ctx context.Context) error {
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.base+"/newGid", nil)
		resp, err := client.Do(req)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK && bytes.Contains(body, []byte(`"gid"`)) {
				return nil
			}
			err = fmt.Errorf("newGid answered %d: %s", resp.StatusCode, body)
		}
		select {
		case <-s.exited:
			return errors.New("process exited")
		case <-ctx.Done():
			return errors.Join(ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// freePorts returns n distinct loopback ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("dtmserver: finding a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// URL returns the base of the server's HTTP API, like http://127.0.0.1:PORT/api/dtmsvr: the value dtmcli
// takes as its server argument.
func (s *Server) URL() string { return s.base }

// HTTPPort returns the server's HTTP port.
func (s *Server) HTTPPort() int { return s.httpPort }

// GRPCPort returns the server's gRPC port.
func (s *Server) GRPCPort() int { return s.grpcPort }

// Dir returns the server's working directory, which holds dtm.bolt. Stop removes it unless it was
// given as Options.Dir.
func (s *Server) Dir() string { return s.dir }

// Stop sends SIGINT, waits up to the stop timeout, sends SIGKILL if the server is still running, waits
// for it to exit and removes its working directory (unless it was given as Options.Dir). It is safe to
// call more than once, and with Kill: later calls return the first call's result. It returns an error
// only when the directory cannot be removed.
func (s *Server) Stop() error { return s.end(true) }

// Kill ends the server with SIGKILL, as a crash would: no graceful shutdown, requests in progress are
// cut off, and the transactions it was driving stay in its store (Options.Dir, or Options.MySQL) for a
// server started again on it, or another sharing it, to finish. Like Stop it removes a temporary
// working directory but keeps Options.Dir; after either, the other does nothing. It returns an error
// only when the directory cannot be removed.
func (s *Server) Kill() error { return s.end(false) }

func (s *Server) end(graceful bool) error {
	s.stopOnce.Do(func() {
		if s.cmd != nil && s.cmd.Process != nil {
			select {
			case <-s.exited:
			default:
				// SIGINT, not SIGTERM: the go-zero driver linked into the server catches SIGTERM
				// and holds the process for 5.5 s; SIGINT ends it at once, before or after DTM's own
				// handler is installed.
				if !graceful || s.cmd.Process.Signal(os.Interrupt) != nil {
					_ = s.cmd.Process.Kill()
				}
				select {
				case <-s.exited:
				case <-time.After(s.stopWait):
					_ = s.cmd.Process.Kill()
					<-s.exited
				}
			}
		}
		if s.keepDir {
			return
		}
		if err := os.RemoveAll(s.dir); err != nil {
			s.stopErr = fmt.Errorf("dtmserver: removing %s: %w", s.dir, err)
		}
	})
	return s.stopErr
}

// Done returns a channel closed when the server process has exited (after Stop or Kill, or on its
// own); [Server.ExitErr] then says how it ended.
func (s *Server) Done() <-chan struct{} { return s.exited }

// ExitErr returns how the server process ended (exec.Cmd.Wait's error: nil for a clean exit) once it
// has exited, and nil while it runs.
func (s *Server) ExitErr() error {
	select {
	case <-s.exited:
		return s.waitErr
	default:
		return nil
	}
}

// Exited reports whether the server process has exited (after Stop or Kill, or on its own).
func (s *Server) Exited() bool {
	select {
	case <-s.exited:
		return true
	default:
		return false
	}
}

// Trans is a global transaction as the server's query API reports it.
type Trans struct {
	Gid       string `json:"gid"`
	TransType string `json:"trans_type"`
	// Status is prepared, submitted, aborting, succeed or failed; empty when the server does not know gid.
	Status         string   `json:"status"`
	RollbackReason string   `json:"rollback_reason"`
	Branches       []Branch `json:"-"`
}

// Branch is one branch operation of a global transaction.
type Branch struct {
	BranchID string `json:"branch_id"`
	Op       string `json:"op"`
	URL      string `json:"url"`
	Status   string `json:"status"`
}

// Query asks the server's query API (GET <URL>/query?gid=) for a global transaction. An unknown gid
// yields a Trans with an empty Status.
func (s *Server) Query(ctx context.Context, gid string) (*Trans, error) {
	var out struct {
		Transaction *Trans   `json:"transaction"`
		Branches    []Branch `json:"branches"`
	}
	if err := s.call(ctx, http.MethodGet, "/query?gid="+url.QueryEscape(gid), nil, &out); err != nil {
		return nil, err
	}
	t := out.Transaction
	if t == nil {
		t = &Trans{Gid: gid}
	}
	t.Branches = out.Branches
	return t, nil
}

// ResetNextCronTime makes the server process a global transaction again at its next cron tick (every
// CronInterval) instead of waiting for its retry interval (10 s, doubling on errors). It calls
// POST <URL>/resetNextCronTime for gid and, because DTM v1.19.0's boltdb store does not update its cron
// index there, also GET <URL>/resetCronTime?timeout=0, which brings forward every transaction of this
// server that waits for a retry.
func (s *Server) ResetNextCronTime(ctx context.Context, gid string) error {
	if err := s.call(ctx, http.MethodPost, "/resetNextCronTime", map[string]string{"gid": gid}, nil); err != nil {
		return err
	}
	return s.call(ctx, http.MethodGet, "/resetCronTime?timeout=0&limit=1000", nil, nil)
}

func (s *Server) call(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("dtmserver: %w", err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.base+path, body)
	if err != nil {
		return fmt.Errorf("dtmserver: %w", err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("dtmserver: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("dtmserver: %s %s: %w", method, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("dtmserver: %s %s: status %d: %s", method, path, resp.StatusCode, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("dtmserver: %s %s: decoding %q: %w", method, path, b, err)
		}
	}
	return nil
}

// tailWriter forwards to w and keeps the last lines for error messages.
type tailWriter struct {
	w    io.Writer
	mu   sync.Mutex
	part []byte
	tail tailBuffer
}

func (t *tailWriter) Write(p []byte) (int, error) {
	t.mu.Lock()
	t.part = append(t.part, p...)
	for {
		i := bytes.IndexByte(t.part, '\n')
		if i < 0 {
			break
		}
		t.tail.WriteLine(string(t.part[:i]))
		t.part = t.part[i+1:]
	}
	if len(t.part) > 4096 {
		t.tail.WriteLine(string(t.part))
		t.part = t.part[:0]
	}
	t.mu.Unlock()
	_, _ = t.w.Write(p) // a failing log writer must not stop the server
	return len(p), nil
}
