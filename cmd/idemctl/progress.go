package main

import (
	"fmt"
	"sync"
	"time"
)

// progress shows a one-line indicator on stderr while a scan runs, when stderr is a terminal: what
// is being done, the rows read so far and the time spent. It redraws every 200ms from its own
// goroutine, which stop ends and waits for.
type progress struct {
	mu    sync.Mutex
	n     int
	done  chan struct{}
	ended chan struct{}
}

func (c *cli) startProgress(label string) *progress {
	p := &progress{}
	if !c.terminal {
		return p
	}
	p.done, p.ended = make(chan struct{}), make(chan struct{})
	start := time.Now()
	frames := `|/-\`
	go func() {
		defer close(p.ended)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for i := 0; ; i++ {
			select {
			case <-p.done:
				fmt.Fprint(c.stderr, "\r\033[K")
				return
			case <-t.C:
			}
			p.mu.Lock()
			n := p.n
			p.mu.Unlock()
			rows := ""
			if n > 0 {
				rows = fmt.Sprintf(", %d rows", n)
			}
			fmt.Fprintf(c.stderr, "\r\033[K%c %s%s, %s", frames[i%len(frames)], label, rows, time.Since(start).Round(100*time.Millisecond))
		}
	}()
	return p
}

// set records how many rows were read.
func (p *progress) set(n int) {
	p.mu.Lock()
	p.n = n
	p.mu.Unlock()
}

// stop clears the line and waits for the goroutine.
func (p *progress) stop() {
	if p.done == nil {
		return
	}
	close(p.done)
	<-p.ended
	p.done = nil
}
