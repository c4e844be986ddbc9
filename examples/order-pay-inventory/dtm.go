package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"sync"

	"github.com/idemkit/idemkit/internal/dtmserver"
)

// dtm is the DTM server the services use: an external one (Config.DTM) or a child process.
type dtm struct {
	url   string
	child *dtmserver.Server
	logs  *tail
}

// dtmDir is the child server's working directory in the data directory: its boltdb store (dtm.bolt)
// lives there, so a restart on the same data directory resumes the transactions in flight.
const dtmDir = "dtm"

// startDTM returns the external server of cfg, or builds (on first use, reporting to progress) and
// starts a DTM server child process on free loopback ports, its store in cfg.DataDir (or, without a
// data directory, in a temporary one that dies with it).
func startDTM(ctx context.Context, cfg *Config, progress io.Writer) (*dtm, error) {
	if cfg.DTM != "" {
		return &dtm{url: cfg.DTM}, nil
	}
	logs := &tail{max: 64 << 10}
	var dir string
	if cfg.DataDir != "" {
		dir = filepath.Join(cfg.DataDir, dtmDir)
	}
	srv, err := dtmserver.Start(ctx, &dtmserver.Options{BuildProgress: progress, Log: logs, Dir: dir})
	if err != nil {
		return nil, fmt.Errorf("starting the DTM server: %w", err)
	}
	return &dtm{url: srv.URL(), child: srv, logs: logs}, nil
}

// describe says where the server is, for the start banner.
func (d *dtm) describe() string {
	if d.child == nil {
		return d.url + " (external)"
	}
	return fmt.Sprintf("%s (child process, store %s)", d.url, filepath.Join(d.child.Dir(), "dtm.bolt"))
}

// stop stops a child process; an external server is left alone.
func (d *dtm) stop() error {
	if d.child == nil {
		return nil
	}
	return d.child.Stop()
}

// log returns the end of a child server's log.
func (d *dtm) log() string {
	if d.logs == nil {
		return ""
	}
	return d.logs.String()
}

// tail keeps the last max bytes written to it. It is safe for concurrent use.
type tail struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > 2*t.max {
		t.buf = append([]byte(nil), t.buf[len(t.buf)-t.max:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.buf) > t.max {
		return string(t.buf[len(t.buf)-t.max:])
	}
	return string(t.buf)
}
