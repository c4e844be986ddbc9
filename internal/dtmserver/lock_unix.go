//go:build unix

package dtmserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// lockDir takes an exclusive flock on dir/.lock, polling so that ctx bounds the wait. The lock is released
// by the returned function, or by the kernel when the process dies.
func lockDir(ctx context.Context, dir string, progress io.Writer) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("dtmserver: opening build lock: %w", err)
	}
	start := time.Now()
	reported := time.Time{}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() {
				_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
				_ = f.Close()
			}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			_ = f.Close()
			return nil, fmt.Errorf("dtmserver: taking build lock: %w", err)
		}
		if time.Since(reported) >= progressEvery {
			fmt.Fprintf(progress, "dtmserver: waiting for another process building the DTM server (%s elapsed)\n",
				time.Since(start).Round(time.Second))
			reported = time.Now()
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, fmt.Errorf("dtmserver: waiting for the build lock: %w", ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}
