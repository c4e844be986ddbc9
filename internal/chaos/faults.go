//go:build unix

package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"syscall"
	"time"
)

// Bounds of the faults.
const (
	serviceDown       = time.Second      // how long Redis or the database stays down
	trapWait          = 8 * time.Second  // longest wait for an armed trap to fire
	takeoverWait      = 20 * time.Second // longest a stall's takeover may take
	staleOutcomeWait  = 15 * time.Second // longest wait for the resumed worker's business outcome
	respawnDelay      = 300 * time.Millisecond
	stallMarginPastTT = 300 * time.Millisecond
)

// FaultRecord is one injected fault and what came of it.
type FaultRecord struct {
	Kind     FaultKind     `json:"kind"`
	At       time.Duration `json:"at"`   // since the load started
	Took     time.Duration `json:"took"` // until the system was whole again
	Injected bool          `json:"injected"`
	Detail   string        `json:"detail"`
	// Worker kill and stall: the trapped worker and operation.
	Worker string `json:"worker,omitempty"`
	Path   string `json:"path,omitempty"`
	Key    string `json:"key,omitempty"`
	// Stall: the frozen attempt's fence, the fence of the effect the takeover answered with, and
	// what the frozen attempt's business write did once resumed ("stale": refused by the fence).
	StaleFence    int64  `json:"stale_fence,omitempty"`
	TakeoverFence int64  `json:"takeover_fence,omitempty"`
	TakeoverClass string `json:"takeover_class,omitempty"`
	StaleOutcome  string `json:"stale_outcome,omitempty"`
}

// Shown tells whether the fault did what it is there for: it was injected, and a stall also showed
// the fence refusing the frozen attempt's business write once a takeover had applied the effect — or,
// in Mark mode, where a mark has no lease to run out, the mark holding its key while frozen (the
// takeover answered as a duplicate) and the frozen function applying its transfer once resumed.
func (r *FaultRecord) Shown() bool {
	switch {
	case !r.Injected || r.Kind != FaultWorkerStall:
		return r.Injected
	case r.Path == PathMarkExec:
		return r.TakeoverClass == ClassDuplicate && r.StaleOutcome == string(bizApplied)
	}
	return r.StaleOutcome == string(bizStale)
}

// stallPaths are the paths stalls freeze a worker in, in turn: Execute mode or HTTP, whose claims a
// takeover replaces at the next fence; then Mark mode, whose mark no takeover replaces.
var stallPaths = [...]string{PathExec + "," + PathHTTP, PathMarkExec}

// faultRunner injects faults one at a time.
type faultRunner struct {
	cfg    Config
	pool   *workerPool
	lg     *loadGen
	events *eventLog
	redis  *redisServer
	db     dbServer
	rng    *lockedRand
	start  time.Time
	logf   func(string, ...any)

	records []FaultRecord
	kills   int
	stalls  int
}

// run injects cfg.Faults in turn every FaultInterval, starting after one interval (at most a fifth
// of the load), and after 80% of the load only a kind that has not shown its effect yet (see
// [FaultRecord.Shown]) — a slow fault or a trap that did not fire must not leave a kind untried,
// while the end of the load otherwise runs undisturbed. It returns when the schedule is done or load
// ends, with every fault undone.
func (f *faultRunner) run(load context.Context) {
	if len(f.cfg.Faults) == 0 {
		return
	}
	first := min(f.cfg.FaultInterval, f.cfg.Duration/5)
	last := f.cfg.Duration * 8 / 10
	next := first
	shown := map[FaultKind]bool{}
	for i := 0; f.cfg.MaxFaults == 0 || i < f.cfg.MaxFaults; i++ {
		kind := f.cfg.Faults[i%len(f.cfg.Faults)]
		if next > last {
			kind = ""
			for _, k := range f.cfg.Faults {
				if !shown[k] {
					kind = k
					break
				}
			}
			if kind == "" {
				return
			}
		}
		sleepCtx(load, time.Until(f.start.Add(next)))
		if load.Err() != nil {
			return
		}
		rec := FaultRecord{Kind: kind, At: time.Since(f.start)}
		t0 := time.Now()
		// Faults run to completion even when the load ends meanwhile: a half-done fault (a frozen
		// worker, a stopped database) must never be left behind.
		ctx := context.WithoutCancel(load)
		switch kind {
		case FaultRedisRestart:
			f.redisRestart(ctx, &rec)
		case FaultMariaDBRestart, FaultPostgresRestart:
			f.databaseRestart(ctx, &rec)
		case FaultWorkerKill:
			f.workerKill(ctx, &rec)
		case FaultWorkerStall:
			f.workerStall(ctx, &rec)
		}
		rec.Took = time.Since(t0)
		shown[kind] = shown[kind] || rec.Shown()
		f.records = append(f.records, rec)
		b, _ := json.Marshal(rec)
		f.logf("fault: %s", b)
		next = max(next+f.cfg.FaultInterval, time.Since(f.start)+f.cfg.FaultInterval/2)
	}
}

func (f *faultRunner) redisRestart(ctx context.Context, rec *FaultRecord) {
	if err := f.redis.Restart(ctx, serviceDown); err != nil {
		rec.Detail = "restart failed: " + err.Error()
		return
	}
	rec.Injected = true
	rec.Detail = fmt.Sprintf("redis-server SIGKILLed, down %s, restarted empty", serviceDown)
}

func (f *faultRunner) databaseRestart(ctx context.Context, rec *FaultRecord) {
	how, err := f.db.Restart(ctx, serviceDown)
	if err != nil {
		rec.Detail = "restart failed: " + err.Error()
		return
	}
	rec.Injected = true
	rec.Detail = fmt.Sprintf("database server stopped with %s, down %s, restarted", how, serviceDown)
}

// arm arms a trap in a random live worker, for functions of path ("" for any), and waits for it to
// fire.
func (f *faultRunner) arm(ctx context.Context, kind, path string, rec *FaultRecord) (*workerSlot, Event, bool) {
	s := f.pool.pick(f.rng, nil)
	if s == nil {
		rec.Detail = "no live worker"
		return nil, Event{}, false
	}
	id, _, _, _ := s.current()
	rec.Worker = id
	from := f.events.len()
	if err := f.pool.ctl(ctx, s, "/ctl/trap?kind="+kind+"&path="+path); err != nil {
		rec.Detail = "arming: " + err.Error()
		return nil, Event{}, false
	}
	e, ok := f.events.find(ctx, from, trapWait, func(e Event) bool {
		return e.Word == "INSIDE" && e.Worker == id && e.Kind == kind
	})
	if !ok {
		_ = f.pool.ctl(ctx, s, "/ctl/trap?kind=")
		_ = f.pool.ctl(ctx, s, "/ctl/release")
		rec.Detail = "trap did not fire within " + trapWait.String()
		return nil, Event{}, false
	}
	rec.Path, rec.Key = e.Path, e.Key
	return s, e, true
}

// workerKill SIGKILLs a worker inside a business function (writes done, commit pending) and starts
// a replacement.
func (f *faultRunner) workerKill(ctx context.Context, rec *FaultRecord) {
	path := paths[f.kills%len(paths)] // Execute-mode kills leave a PROCESSING claim behind
	f.kills++
	s, e, ok := f.arm(ctx, trapKill, path, rec)
	if !ok {
		return
	}
	f.pool.kill(s)
	rec.Injected = true
	rec.Detail = fmt.Sprintf("SIGKILL inside the business function of %s %s (fence %d), before its commit", e.Path, e.Key, e.Fence)
	sleepCtx(ctx, respawnDelay)
	if err := f.pool.spawn(ctx, s); err != nil {
		rec.Detail += "; respawn failed: " + err.Error()
	}
}

// workerStall freezes a worker inside a business function past its lock TTL and lease, has another
// worker take the key over and finish it, then resumes the frozen one and waits for its business
// write's outcome: refused by the fence register ("stale") is the expected one. Every other stall
// freezes a Mark-mode function instead: its mark has no lease, so the takeover is answered as a
// duplicate, and the resumed function applies its transfer ("applied").
func (f *faultRunner) workerStall(ctx context.Context, rec *FaultRecord) {
	path := stallPaths[f.stalls%len(stallPaths)]
	f.stalls++
	s, e, ok := f.arm(ctx, trapStall, path, rec)
	if !ok {
		return
	}
	rec.StaleFence = e.Fence
	_, _, pr, _ := s.current()
	if err := pr.signal(syscall.SIGSTOP); err != nil {
		rec.Detail = "SIGSTOP: " + err.Error()
		_ = f.pool.ctl(ctx, s, "/ctl/release")
		return
	}
	rec.Injected = true
	frozen := time.Now()
	sleepCtx(ctx, max(f.cfg.Lease, f.cfg.LockTTL)+stallMarginPastTT)

	// Take the key over from another worker, as a client retrying would.
	k := f.lg.lookup(e.Key)
	deadline := time.Now().Add(takeoverWait)
	for k != nil && time.Now().Before(deadline) {
		a := f.lg.send(ctx, k, f.pool.pick(f.rng, s), PhaseTakeover)
		if terminalClass(a.Class) {
			rec.TakeoverClass = a.Class
			rec.TakeoverFence = valueFence(a)
			break
		}
		sleepCtx(ctx, 150*time.Millisecond)
	}
	from := f.events.len()
	_ = pr.signal(syscall.SIGCONT)
	held := time.Since(frozen)
	if err := f.pool.ctl(ctx, s, "/ctl/release"); err != nil {
		rec.Detail = "release: " + err.Error()
	}
	id, _, _, _ := s.current()
	out, ok := f.events.find(ctx, from, staleOutcomeWait, func(ev Event) bool {
		return ev.Word == "EVENT" && ev.Worker == id && ev.Key == e.Key && ev.Fence == e.Fence && ev.Kind != "fenced"
	})
	rec.StaleOutcome = "none reported"
	if ok {
		rec.StaleOutcome = out.Kind
	}
	rec.Detail = fmt.Sprintf("SIGSTOP %s for %s inside %s %s (fence %d) before its business write; takeover answered %s (effect fence %d); after SIGCONT the frozen attempt's write was %s",
		id, held.Round(time.Millisecond), e.Path, e.Key, e.Fence, rec.TakeoverClass, rec.TakeoverFence, rec.StaleOutcome)
}

// valueFence is the fence in a success answer's value (the fence of the attempt that applied the
// effect), or 0.
func valueFence(a Answer) int64 {
	var v struct {
		Fence int64 `json:"fence"`
	}
	if a.Class != ClassOK && a.Class != ClassReplay {
		return 0
	}
	_ = json.Unmarshal([]byte(a.Value), &v)
	return v.Fence
}
