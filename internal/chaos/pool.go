//go:build unix

package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Bounds of a worker's lifecycle, seen from the harness.
const (
	workerReadyTimeout = 60 * time.Second
	workerStopGrace    = 8 * time.Second
	ctlTimeout         = 3 * time.Second
)

// Event is a line a worker reported: INSIDE (a trap fired) or EVENT (stale, adopted, fenced).
type Event struct {
	At     time.Time `json:"at"`
	Worker string    `json:"worker"`
	Word   string    `json:"word"` // INSIDE or EVENT
	Kind   string    `json:"kind"` // INSIDE: kill, stall; EVENT: stale, adopted, fenced
	Path   string    `json:"path"`
	Key    string    `json:"key"`
	Fence  int64     `json:"fence"`
	Biz    string    `json:"biz,omitempty"` // EVENT fenced of the RPC paths: what the function did
}

// eventLog collects the workers' events; find polls it (bounded).
type eventLog struct {
	mu  sync.Mutex
	all []Event
}

func (l *eventLog) add(e Event) {
	l.mu.Lock()
	l.all = append(l.all, e)
	l.mu.Unlock()
}

func (l *eventLog) snapshot() []Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Event(nil), l.all...)
}

// find waits up to timeout for an event at index from or later that match accepts.
func (l *eventLog) find(ctx context.Context, from int, timeout time.Duration, match func(Event) bool) (Event, bool) {
	deadline := time.Now().Add(timeout)
	for {
		l.mu.Lock()
		for i := from; i < len(l.all); i++ {
			if match(l.all[i]) {
				e := l.all[i]
				l.mu.Unlock()
				return e, true
			}
		}
		l.mu.Unlock()
		if ctx.Err() != nil || time.Now().After(deadline) {
			return Event{}, false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (l *eventLog) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.all)
}

// workerSlot is one of the run's worker positions; a killed worker is replaced in its slot.
type workerSlot struct {
	idx int

	mu    sync.Mutex
	gen   int
	id    string
	addr  string
	p     *proc
	stdin io.WriteCloser
	alive bool
}

func (s *workerSlot) current() (id, addr string, p *proc, alive bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.id, s.addr, s.p, s.alive
}

// workerPool starts, tracks and stops the worker processes.
type workerPool struct {
	exe    string
	base   workerConfig
	dir    string
	procs  *procSet
	events *eventLog
	logf   func(string, ...any)
	client *http.Client
	slots  []*workerSlot

	mu      sync.Mutex
	stats   map[string]WorkerStats // last STATS per worker id
	crashes []string               // workers that exited when the harness did not stop them
	started int
}

func newWorkerPool(exe string, base workerConfig, n int, dir string, procs *procSet, events *eventLog, logf func(string, ...any)) *workerPool {
	p := &workerPool{
		exe: exe, base: base, dir: dir, procs: procs, events: events, logf: logf,
		client: &http.Client{Timeout: ctlTimeout},
		stats:  make(map[string]WorkerStats),
	}
	for i := range n {
		p.slots = append(p.slots, &workerSlot{idx: i + 1})
	}
	return p
}

// startAll starts a worker in every slot.
func (p *workerPool) startAll(ctx context.Context) error {
	for _, s := range p.slots {
		if err := p.spawn(ctx, s); err != nil {
			return err
		}
	}
	return nil
}

// spawn starts a new worker process in slot s and waits until it serves.
func (p *workerPool) spawn(ctx context.Context, s *workerSlot) error {
	s.mu.Lock()
	s.gen++
	id := fmt.Sprintf("w%d.%d", s.idx, s.gen)
	multi := (s.idx+s.gen)%2 == 1
	s.mu.Unlock()
	cfg := p.base
	cfg.ID = id
	// On MariaDB every other worker process allows multi-statement packets: its Guard-owned
	// transactions then begin with the read (or, with the Locker, with the business's first
	// statement) and end with the record's INSERT and the COMMIT in one packet.
	cfg.MultiStatements = multi && cfg.Database == MariaDB
	raw, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	logPath := filepath.Join(p.dir, id+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logFile.Close() // the child has its own descriptor
	cmd := exec.Command(p.exe)
	cmd.Env = append(os.Environ(), WorkerEnv+"="+string(raw))
	cmd.Stderr = logFile
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	pr, err := p.procs.start("worker "+id, cmd)
	if err != nil {
		return err
	}
	ready := make(chan string, 1)
	go p.readLines(id, stdout, ready)
	go func() {
		<-pr.done
		p.procs.forget(pr)
		s.mu.Lock()
		if s.p == pr {
			s.alive = false
		}
		s.mu.Unlock()
		if !pr.isExpected() {
			msg := fmt.Sprintf("worker %s exited unexpectedly (%v); its log ends:\n%s", id, pr.err, tailFile(logPath, 3000))
			p.mu.Lock()
			p.crashes = append(p.crashes, msg)
			p.mu.Unlock()
			p.logf("%s", msg)
		}
	}()
	select {
	case addr := <-ready:
		s.mu.Lock()
		s.id, s.addr, s.p, s.stdin, s.alive = id, addr, pr, stdin, true
		s.mu.Unlock()
		p.mu.Lock()
		p.started++
		p.mu.Unlock()
		return nil
	case <-pr.done:
		return fmt.Errorf("worker %s exited before serving (%v):\n%s", id, pr.err, tailFile(logPath, 3000))
	case <-time.After(workerReadyTimeout):
	case <-ctx.Done():
	}
	pr.kill()
	return fmt.Errorf("worker %s did not report READY within %s:\n%s", id, workerReadyTimeout, tailFile(logPath, 3000))
}

// readLines parses a worker's stdout protocol until it closes.
func (p *workerPool) readLines(id string, r io.Reader, ready chan<- string) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "READY":
			if len(f) == 2 {
				select {
				case ready <- f[1]:
				default:
				}
			}
		case "STATS":
			var st WorkerStats
			if len(f) == 2 && json.Unmarshal([]byte(f[1]), &st) == nil {
				p.mu.Lock()
				p.stats[id] = st
				p.mu.Unlock()
			}
		case "INSIDE", "EVENT":
			if len(f) < 5 {
				continue
			}
			fence, _ := strconv.ParseInt(f[4], 10, 64)
			e := Event{At: time.Now(), Worker: id, Word: f[0], Kind: f[1], Path: f[2], Key: f[3], Fence: fence}
			if len(f) > 5 {
				e.Biz = f[5]
			}
			p.events.add(e)
		}
	}
}

// pick returns a random live slot other than except (nil for none), or nil if there is none.
func (p *workerPool) pick(rng *lockedRand, except *workerSlot) *workerSlot {
	var live []*workerSlot
	for _, s := range p.slots {
		if s == except {
			continue
		}
		if _, _, _, alive := s.current(); alive {
			live = append(live, s)
		}
	}
	if len(live) == 0 {
		return nil
	}
	return live[rng.IntN(len(live))]
}

// ctl posts a control request to the worker in slot s.
func (p *workerPool) ctl(ctx context.Context, s *workerSlot, path string) error {
	_, addr, _, _ := s.current()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+path, nil)
	if err != nil {
		return err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("%s: %s", path, resp.Status)
	}
	return nil
}

// kill SIGKILLs the worker in slot s and waits for it.
func (p *workerPool) kill(s *workerSlot) {
	s.mu.Lock()
	pr, stdin := s.p, s.stdin
	s.alive, s.stdin = false, nil
	s.mu.Unlock()
	if pr != nil {
		pr.kill()
	}
	if stdin != nil {
		_ = stdin.Close()
	}
}

// startedCount is the number of worker processes started so far.
func (p *workerPool) startedCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.started
}

// ensureAll restarts the workers of dead slots.
func (p *workerPool) ensureAll(ctx context.Context) error {
	var errs []error
	for _, s := range p.slots {
		if _, _, _, alive := s.current(); !alive {
			errs = append(errs, p.spawn(ctx, s))
		}
	}
	return errors.Join(errs...)
}

// stopAll closes every worker's stdin (a clean stop), waits, and kills those still running.
func (p *workerPool) stopAll() {
	var wg sync.WaitGroup
	for _, s := range p.slots {
		s.mu.Lock()
		pr, stdin := s.p, s.stdin
		s.alive = false
		s.mu.Unlock()
		if pr == nil {
			continue
		}
		pr.markExpected()
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = pr.signal(syscall.SIGCONT) // a stopped worker cannot read its stdin
			if stdin != nil {
				_ = stdin.Close()
			}
			select {
			case <-pr.done:
			case <-time.After(workerStopGrace):
				pr.kill()
			}
		}()
	}
	wg.Wait()
}

// totals sums the workers' last reported counters.
func (p *workerPool) totals() WorkerStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	var t WorkerStats
	for _, s := range p.stats {
		t.add(s)
	}
	return t
}

func (p *workerPool) crashList() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.crashes...)
}

// lockedRand is a seeded math/rand/v2 source safe for concurrent use.
type lockedRand struct {
	mu sync.Mutex
	r  *rand.Rand
}

func newLockedRand(seed int64) *lockedRand {
	return &lockedRand{r: rand.New(rand.NewPCG(uint64(seed), uint64(seed)>>1|1))}
}

func (l *lockedRand) IntN(n int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.IntN(n)
}

func (l *lockedRand) Float64() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.Float64()
}
