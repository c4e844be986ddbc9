package chaosdtmmsg

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/dtmmsg"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/internal/dtmserver"
	"github.com/idemkit/idemkit/txstatus"
)

// Defaults of [Config].
const (
	DefaultDSN          = "root:@tcp(127.0.0.1:3306)/idemkit_test"
	DefaultPublications = 60
	DefaultParallel     = 4
	DefaultDupRate      = 0.3
	DefaultFailRate     = 0.1
	DefaultKillRate     = 0.5
	DefaultLease        = 2 * time.Second
)

// Kill points.
const (
	KillNone        = "none"
	KillInLocal     = "in-local"     // inside the local transaction (it never commits)
	KillAfterCommit = "after-commit" // between the local commit and the submit
	KillRandom      = "random"       // at a random moment of the publication
)

// Config configures [Run]. The zero value works.
type Config struct {
	DSN          string        // MariaDB with the database; defaults to DefaultDSN
	DTM          string        // a running DTM server's API base; default: start one (built on first use)
	Publications int           // publisher processes, one publication each; defaults to DefaultPublications
	Parallel     int           // publishers at once; defaults to DefaultParallel
	DupRate      float64       // share of publications that repeat an earlier key; defaults to DefaultDupRate, negative none
	FailRate     float64       // share of keys whose local transaction fails permanently; defaults to DefaultFailRate, negative none
	KillRate     float64       // share of publishers SIGKILLed; defaults to DefaultKillRate, negative none
	KillPoints   []string      // where kills land, chosen at random among these; defaults to all three
	Lease        time.Duration // the publishers' Guard Lease; defaults to DefaultLease
	Seed         uint64        // 0: from the clock
	Prefix       string        // table prefix; defaults to a fresh one
	KeepTables   bool
	// BrokenBackCheck serves a back-check that always answers SUCCESS, to show the checker catches a
	// message published without its local commit.
	BrokenBackCheck bool
	Logf            func(format string, args ...any)
}

// Report is what a run did and found.
type Report struct {
	Publications int            `json:"publications"`
	Keys         int            `json:"keys"`
	Duplicates   int            `json:"duplicates"`
	FailingKeys  int            `json:"failing_keys"` // keys whose local transaction fails permanently
	Kills        map[string]int `json:"kills"`        // SIGKILLs by kill point
	Replayed     int            `json:"replayed"`     // publishers answered from the record
	InFlight     int            `json:"in_flight"`    // publishers answered ErrInFlight
	Committed    int            `json:"committed"`    // local transactions committed
	Published    int            `json:"published"`    // messages whose branch took effect
	Deliveries   int64          `json:"deliveries"`   // branch calls DTM made
	Reconciled   int            `json:"reconciled"`   // records settled by the Reconciler
	Probes       int            `json:"probes"`       // duplicates sent after the run to keys that finished
	BackChecked  int            `json:"back_checked"` // committed messages DTM published without their submit
	Violations   []string       `json:"violations"`
}

// Summary renders the report.
func (r *Report) Summary() string {
	s := fmt.Sprintf("dtm msg chaos: %d publications (%d keys, %d duplicates, %d failing keys), kills %v\n"+
		"  %d replayed, %d in flight, %d local commits, %d published (%d via the back-check after a kill), %d branch calls, %d reconciled, %d duplicate probes\n"+
		"  violations: %d\n", r.Publications, r.Keys, r.Duplicates, r.FailingKeys, r.Kills, r.Replayed, r.InFlight,
		r.Committed, r.Published, r.BackChecked, r.Deliveries, r.Reconciled, r.Probes, len(r.Violations))
	for i, v := range r.Violations {
		if i == 20 {
			s += fmt.Sprintf("  ... and %d more\n", len(r.Violations)-20)
			break
		}
		s += "  - " + v + "\n"
	}
	return s
}

type pub struct {
	key    string
	amount int64
	kill   string
}

// Run runs the DTM msg chaos scenario and checks it. It returns an error when the harness could not
// run; violations are in the Report.
func Run(ctx context.Context, c *Config) (*Report, error) {
	cfg := *c
	cfg.DSN = cmp.Or(cfg.DSN, DefaultDSN)
	cfg.Publications = cmp.Or(cfg.Publications, DefaultPublications)
	cfg.Parallel = cmp.Or(cfg.Parallel, DefaultParallel)
	cfg.DupRate = cmp.Or(cfg.DupRate, DefaultDupRate)
	cfg.FailRate = cmp.Or(cfg.FailRate, DefaultFailRate)
	cfg.KillRate = cmp.Or(cfg.KillRate, DefaultKillRate)
	cfg.Lease = cmp.Or(cfg.Lease, DefaultLease)
	if cfg.Seed == 0 {
		cfg.Seed = uint64(time.Now().UnixNano())
	}
	if cfg.Prefix == "" {
		cfg.Prefix = "msgchaos" + strconv.FormatUint(rand.Uint64()&0xffffff, 16)
	}
	logf := cfg.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 11))
	points := cfg.KillPoints
	if len(points) == 0 {
		points = []string{KillInLocal, KillAfterCommit, KillRandom}
	}

	dtm := cfg.DTM
	var dsrv *dtmserver.Server
	if dtm == "" {
		logf("dtm msg chaos: starting a DTM server (built on first use, a few minutes)")
		var err error
		if dsrv, err = dtmserver.Start(ctx, &dtmserver.Options{Env: []string{"LOG_LEVEL=warn"}}); err != nil {
			return nil, err
		}
		defer dsrv.Stop()
		dtm = dsrv.URL()
	}

	w, err := Open(cfg.DSN, NewTables(cfg.Prefix), cfg.Lease)
	if err != nil {
		return nil, err
	}
	defer w.Close()
	if err := w.Create(ctx); err != nil {
		_ = w.Drop(context.Background())
		return nil, fmt.Errorf("creating tables: %w", err)
	}
	rep := &Report{Kills: map[string]int{}}
	defer func() {
		if len(rep.Violations) == 0 && !cfg.KeepTables {
			_ = w.Drop(context.Background())
		}
	}()

	// The service (branch + back-check) and the proxy in front of DTM, both in this process.
	h, err := w.Handler(cfg.BrokenBackCheck)
	if err != nil {
		return nil, err
	}
	svc, stopSvc, err := serve(h)
	if err != nil {
		return nil, err
	}
	defer stopSvc()
	px, err := newProxy(dtm)
	if err != nil {
		return nil, err
	}
	pxURL, stopPx, err := serve(px)
	if err != nil {
		return nil, err
	}
	defer stopPx()
	dtmPath := strings.TrimPrefix(dtm, px.target.String())

	// The plan.
	var keys []pub
	plan := make([]pub, cfg.Publications)
	for i := range plan {
		var p pub
		if len(keys) > 0 && rng.Float64() < cfg.DupRate {
			p = keys[len(keys)-1-rng.IntN(min(len(keys), 6))]
			rep.Duplicates++
		} else {
			p = pub{key: fmt.Sprintf("%s-k%d", cfg.Prefix, len(keys)), amount: 1 + rng.Int64N(100)}
			if rng.Float64() < cfg.FailRate {
				p.amount = -1
				rep.FailingKeys++
			}
			keys = append(keys, p)
		}
		p.kill = KillNone
		if rng.Float64() < cfg.KillRate {
			p.kill = points[rng.IntN(len(points))]
		}
		plan[i] = p
	}
	rep.Publications, rep.Keys = len(plan), len(keys)
	logf("dtm msg chaos: %d publications, %d keys, seed %d", len(plan), len(keys), cfg.Seed)

	// Run the publishers.
	var mu sync.Mutex
	var violations []string
	violate := func(format string, args ...any) {
		mu.Lock()
		violations = append(violations, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	held := map[string]chan struct{}{}
	var heldMu sync.Mutex
	go func() {
		for id := range px.held {
			heldMu.Lock()
			if ch, ok := held[id]; ok {
				close(ch)
				delete(held, id)
			}
			heldMu.Unlock()
		}
	}()
	work := make(chan int)
	var wg sync.WaitGroup
	var runErr error
	for range cfg.Parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				p := plan[i]
				id := strconv.Itoa(i)
				cc := childConfig{DSN: cfg.DSN, Tables: w.Tables, DTM: pxURL + "/c/" + id + dtmPath, Svc: svc,
					Key: p.key, Amount: p.amount, Lease: cfg.Lease, BlockLocal: p.kill == KillInLocal}
				var trigger chan struct{}
				if p.kill == KillAfterCommit {
					trigger = make(chan struct{})
					heldMu.Lock()
					held[id] = trigger
					heldMu.Unlock()
					px.setHold(id, true)
				}
				res, killed, err := runChild(ctx, cc, p.kill, trigger, rand.N(400*time.Millisecond))
				px.setHold(id, false)
				mu.Lock()
				switch {
				case err != nil:
					runErr = err
				case killed:
					rep.Kills[p.kill]++
				case res != nil:
					if res.Replayed {
						rep.Replayed++
					}
					if res.InFlight {
						rep.InFlight++
					}
				}
				mu.Unlock()
			}
		}()
	}
	for i := range plan {
		work <- i
	}
	close(work)
	wg.Wait()
	close(px.held)
	if runErr != nil {
		return rep, runErr
	}

	// Settle: the Reconciler (after the lease) and DTM's back-check resolve what the kills left.
	status := &txstatus.Client{Server: dtm}
	rec := &dtmmsg.Reconciler{Lifecycle: &hooks.Lifecycle{Guard: w.Guard}, Barrier: w.Barrier, Scopes: []string{Scope}, Status: status.Status}
	deadline := time.Now().Add(90 * time.Second)
	for {
		time.Sleep(cfg.Lease / 2)
		n, err := rec.RunOnce(ctx, time.Now(), 1000)
		rep.Reconciled += n
		if err != nil {
			logf("dtm msg chaos: reconcile: %v", err)
		}
		pending, perr := w.Guard.Pending(ctx, time.Now().Add(time.Hour), 1000, Scope)
		if perr == nil && len(pending) == 0 {
			break
		}
		if time.Now().After(deadline) {
			violate("%d records still PROCESSING after 90s of reconciling", len(pending))
			break
		}
	}
	rep.BackChecked = rep.Kills[KillAfterCommit] // each held submit followed a local commit
	// Every message a publisher prepared reaches its outcome at DTM (the back-check decides those
	// whose publisher died) before the branch effects are counted.
	for _, gid := range px.preparedGIDs() {
		if st, err := status.Status(ctx, gid); err == nil && st == txstatus.Unknown {
			continue // the publisher died before DTM recorded its prepare: nothing to wait for
		}
		wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		st, err := status.Wait(wctx, gid)
		cancel()
		if err != nil || !st.Final() {
			violate("message %s did not reach an outcome at DTM: %s %v", gid, st, err)
		}
	}
	check(ctx, w, status, keys, rep, violate)

	// A duplicate of every finished key, now: replayed, and nothing more published.
	pubr := w.Publisher(dtm, svc, 10*time.Second)
	for _, k := range keys {
		r, err := w.Guard.Get(ctx, Scope, k.key)
		if err != nil || !r.Status.Terminal() {
			continue
		}
		rep.Probes++
		out, err := w.PublishOrder(ctx, pubr, svc, k.key, k.amount, nil)
		if !out.Replayed || (r.Status == idemkit.StatusSucceeded) != (err == nil) {
			violate("duplicate of finished key %s (%s): %+v %v, want a replay", k.key, r.Status, out, err)
		}
	}
	var inbox int64
	if err := w.DB.WithContext(ctx).Raw("SELECT COUNT(*) FROM " + w.Tables.Inbox).Scan(&inbox).Error; err == nil && int(inbox) != rep.Published {
		violate("the duplicates published %d more messages", int(inbox)-rep.Published)
	}
	rep.Deliveries = w.Deliveries.Load()
	rep.Violations = violations
	return rep, nil
}

// serve serves h on a loopback port and returns its base URL.
func serve(h http.Handler) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), func() { _ = srv.Close() }, nil
}

// runChild runs one publisher process and kills it at its kill point. It reports the child's result
// when it finished by itself, and whether it was killed.
func runChild(ctx context.Context, cc childConfig, kill string, trigger chan struct{}, randomDelay time.Duration) (*childResult, bool, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, false, err
	}
	raw, _ := json.Marshal(cc)
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), childEnv+"="+string(raw))
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, false, err
	}
	if err := cmd.Start(); err != nil {
		return nil, false, err
	}
	inLocal := make(chan struct{})
	var res *childResult
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "LOCAL":
				close(inLocal)
			case strings.HasPrefix(line, "RESULT "):
				var r childResult
				if json.Unmarshal([]byte(strings.TrimPrefix(line, "RESULT ")), &r) == nil {
					res = &r
				}
			}
		}
	}()
	var killAt <-chan time.Time
	var killOn <-chan struct{}
	switch kill {
	case KillInLocal:
		killOn = inLocal
	case KillAfterCommit:
		killOn = trigger
	case KillRandom:
		killAt = time.After(randomDelay)
	}
	done := make(chan error, 1)
	go func() { <-scanned; done <- cmd.Wait() }()
	timeout := time.After(2 * time.Minute)
	killed := false
	for {
		select {
		case <-killOn:
			killOn = nil
			killed = true
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		case <-killAt:
			killAt = nil
			killed = true
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		case err := <-done:
			if killed {
				if res != nil {
					return res, false, nil // it finished before the kill landed
				}
				return nil, true, nil
			}
			if err != nil || res == nil {
				return nil, false, fmt.Errorf("publisher process failed: %v", err)
			}
			return res, false, nil
		case <-timeout:
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			return nil, false, fmt.Errorf("publisher process hung")
		case <-ctx.Done():
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
			return nil, false, ctx.Err()
		}
	}
}

// check compares the orders (local commits), the inbox (published effects), DTM and the records.
func check(ctx context.Context, w *World, status *txstatus.Client, keys []pub, rep *Report, violate func(string, ...any)) {
	type order struct {
		GID     string `gorm:"column:gid"`
		IdemKey string `gorm:"column:idem_key"`
	}
	var orders []order
	if err := w.DB.WithContext(ctx).Raw("SELECT gid, idem_key FROM " + w.Tables.Orders).Scan(&orders).Error; err != nil {
		violate("reading orders: %v", err)
		return
	}
	rep.Committed = len(orders)
	byKey := map[string][]string{}
	for _, o := range orders {
		byKey[o.IdemKey] = append(byKey[o.IdemKey], o.GID)
	}
	// Every committed local transaction is published, exactly once.
	for _, o := range orders {
		wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		st, err := status.Wait(wctx, o.GID)
		cancel()
		if err != nil || st != txstatus.Succeed {
			violate("message %s (key %s) committed locally but DTM says %s (%v)", o.GID, o.IdemKey, st, err)
		}
		var n int64
		if err := w.DB.WithContext(ctx).Raw("SELECT COUNT(*) FROM "+w.Tables.Inbox+" WHERE gid = ?", o.GID).Scan(&n).Error; err != nil {
			violate("reading inbox: %v", err)
		} else if n != 1 {
			violate("message %s (key %s) committed locally, published %d times", o.GID, o.IdemKey, n)
		}
	}
	// Nothing else is published.
	var inbox []order
	if err := w.DB.WithContext(ctx).Raw("SELECT gid, idem_key FROM " + w.Tables.Inbox).Scan(&inbox).Error; err != nil {
		violate("reading inbox: %v", err)
		return
	}
	rep.Published = len(inbox)
	committed := map[string]bool{}
	for _, o := range orders {
		committed[o.GID] = true
	}
	for _, m := range inbox {
		if !committed[m.GID] {
			violate("message %s (key %s) published without a committed local transaction", m.GID, m.IdemKey)
		}
	}
	// Each key commits at most once, and its record says so.
	for _, k := range keys {
		gids := byKey[k.key]
		if len(gids) > 1 {
			violate("key %s committed %d local transactions: %v", k.key, len(gids), gids)
		}
		rec, err := w.Guard.Get(ctx, Scope, k.key)
		switch {
		case err != nil && len(gids) == 0:
			// never claimed (every publisher of the key died before its claim), nothing published
		case err != nil:
			violate("key %s: reading its record: %v", k.key, err)
		case len(gids) == 1 && (rec.Status != idemkit.StatusSucceeded || rec.GID != gids[0]):
			violate("key %s published %s, its record is %s with gid %s", k.key, gids[0], rec.Status, rec.GID)
		case len(gids) == 0 && k.amount < 0 && rec.Status != idemkit.StatusRejected && rec.Status != idemkit.StatusFailed:
			violate("key %s failed locally, its record is %s", k.key, rec.Status)
		case len(gids) == 0 && rec.Status != idemkit.StatusFailed && rec.Status != idemkit.StatusRejected:
			violate("key %s published nothing, its record is %s", k.key, rec.Status)
		}
		if k.amount < 0 && len(gids) > 0 {
			violate("key %s: a failing local transaction committed", k.key)
		}
	}
}
