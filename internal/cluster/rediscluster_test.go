package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/barrier"
	"github.com/idemkit/idemkit/httpx"
	"github.com/idemkit/idemkit/httpx/redistoken"
	"github.com/idemkit/idemkit/idemtest"
	"github.com/idemkit/idemkit/internal/cluster"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/record"
)

// slotWatch is a go-redis hook that counts every command a client completes and every CROSSSLOT
// error among them: the evidence that no multi-key command of idemkit spans two hash slots.
type slotWatch struct {
	cmds      atomic.Int64
	crossSlot atomic.Int64
	mu        sync.Mutex
	examples  []string
}

func (w *slotWatch) DialHook(next redis.DialHook) redis.DialHook { return next }

func (w *slotWatch) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		w.see(cmd)
		return err
	}
}

func (w *slotWatch) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			w.see(c)
		}
		return err
	}
}

func (w *slotWatch) see(cmd redis.Cmder) {
	w.cmds.Add(1)
	if err := cmd.Err(); err != nil && strings.Contains(err.Error(), "CROSSSLOT") {
		w.crossSlot.Add(1)
		w.mu.Lock()
		if len(w.examples) < 3 {
			w.examples = append(w.examples, fmt.Sprint(cmd.Args()))
		}
		w.mu.Unlock()
	}
}

// check fails t if a CROSSSLOT error was seen (beyond the control's want), or no command at all.
func (w *slotWatch) check(t *testing.T, want int64) {
	t.Helper()
	if w.cmds.Load() == 0 {
		t.Fatal("the slot watch saw no command: it is not installed")
	}
	if got := w.crossSlot.Load(); got != want {
		t.Errorf("%d CROSSSLOT errors in %d commands, want %d: %v", got, w.cmds.Load(), want, w.examples)
	}
}

// counter is an idemkit.Observer counting outcomes, fail-open events and ErrLockUnavailable answers.
type counter struct {
	failOpen, lockErrs, cached, executed, replayed, conflicts atomic.Int64
}

func (c *counter) Start(ctx context.Context, _ idemkit.Mode, _ string) (context.Context, func(*idemkit.Event)) {
	return ctx, func(ev *idemkit.Event) {
		if ev.FailOpen {
			c.failOpen.Add(1)
		}
		if errors.Is(ev.Err, idemkit.ErrLockUnavailable) {
			c.lockErrs.Add(1)
		}
		if ev.Conflict {
			c.conflicts.Add(1)
		}
		switch ev.Outcome {
		case idemkit.OutcomeExecuted:
			c.executed.Add(1)
		case idemkit.OutcomeReplayed:
			c.replayed.Add(1)
			if ev.Cached {
				c.cached.Add(1)
			}
		}
	}
}

// TestRedisCluster runs idemkit's Redis pieces — the lock and result cache, the token service and
// the Redis branch barrier — on a 6-node Redis Cluster (3 masters, 3 replicas) through
// redis.UniversalClient: the Locker conformance suite, each piece's own promise, and duplicate storms
// during which a master is killed with SIGKILL and its replica takes over, once with the Guards'
// FailOpen on and once off. Every client carries a hook that counts CROSSSLOT errors: none may occur.
func TestRedisCluster(t *testing.T) {
	t.Parallel()
	sc := scaleFromEnv()
	started := time.Now()
	c := cluster.StartRedisClusterT(t, nil)
	t.Logf("6-node Redis Cluster up in %s: %v", time.Since(started).Round(time.Millisecond), c.Addrs())
	watch := &slotWatch{}
	// The clients are built the way an application that may run on one Redis or a cluster builds
	// them: redis.NewUniversalClient, which returns a cluster client for several addresses.
	newClientWith := func(t *testing.T, readTimeout time.Duration) redis.UniversalClient {
		cc := redis.NewUniversalClient(&redis.UniversalOptions{
			Addrs: c.Addrs(), ContextTimeoutEnabled: true,
			DialTimeout: time.Second, ReadTimeout: readTimeout, WriteTimeout: time.Second,
		})
		if _, ok := cc.(*redis.ClusterClient); !ok {
			t.Fatalf("NewUniversalClient gave a %T for %d addresses, want a cluster client", cc, len(c.Addrs()))
		}
		cc.AddHook(watch)
		t.Cleanup(func() { _ = cc.Close() })
		return cc
	}
	newClient := func(t *testing.T) redis.UniversalClient { return newClientWith(t, time.Second) }
	cc := newClient(t)
	ctx := context.Background()

	// The control: the cluster refuses a cross-slot script, and the watch sees it.
	err := cc.Eval(ctx, "return redis.call('EXISTS', KEYS[1], KEYS[2])", []string{"{a}x", "{b}x"}).Err()
	if err == nil || !strings.Contains(err.Error(), "CROSSSLOT") {
		t.Fatalf("a cross-slot script gave %v; want CROSSSLOT", err)
	}
	if watch.crossSlot.Load() != 1 {
		t.Fatalf("the slot watch counted %d CROSSSLOT errors for the control, want 1", watch.crossSlot.Load())
	}
	const control = 1

	t.Run("LockerConformance", func(t *testing.T) {
		idemtest.RunLocker(t, func(t *testing.T) idemkit.Locker {
			return lock.New(cc, &lock.Options{Prefix: testsvc.Name("idemkit_cluster_") + ":"})
		})
	})
	// A GETDEL retried after a read timeout finds its token gone (see package redistoken): the count
	// of accepted consumptions holds only if no reply times out, so no 1 s timeout on a busy machine.
	t.Run("TokenService", func(t *testing.T) { testTokensOnCluster(t, newClientWith(t, 30*time.Second), sc) })
	t.Run("RedisBarrier", func(t *testing.T) { testBarrierOnCluster(t, cc, sc) })
	for _, failOpen := range []bool{true, false} {
		t.Run("FailoverStorm/FailOpen="+strconv.FormatBool(failOpen), func(t *testing.T) {
			testFailoverStorm(t, c, newClient, failOpen, sc)
		})
	}
	watch.check(t, control)
	t.Logf("slot watch: %d commands, %d CROSSSLOT (the control)", watch.cmds.Load(), watch.crossSlot.Load())
}

// testTokensOnCluster issues one-time tokens through redistoken on the cluster and consumes each from
// several goroutines at once: exactly one consumption succeeds, and the tokens land on every master.
func testTokensOnCluster(t *testing.T, cc redis.UniversalClient, sc scale) {
	ctx := context.Background()
	prefix := testsvc.Name("idemkit_tok_") + ":"
	tokens, err := httpx.NewTokens(redistoken.New(cc, &redistoken.Options{Prefix: prefix}), nil)
	if err != nil {
		t.Fatal(err)
	}
	n := sc.pick(200, 2000)
	issued := make([]httpx.Token, n)
	for i := range issued {
		if issued[i], err = tokens.Issue(ctx, ""); err != nil {
			t.Fatal(err)
		}
	}
	// Every master holds some of them: the keys really are spread over the cluster.
	var masters atomic.Int64
	err = cc.(*redis.ClusterClient).ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		keys, _, err := m.Scan(ctx, 0, prefix+"*", 10000).Result()
		if len(keys) > 0 {
			masters.Add(1)
		}
		return err
	})
	if err != nil || masters.Load() != 3 {
		t.Fatalf("tokens on %d masters (%v), want 3", masters.Load(), err)
	}
	var ok, refused atomic.Int64
	var wg sync.WaitGroup
	for _, tok := range issued {
		for range 4 {
			wg.Go(func() {
				switch err := tokens.Consume(ctx, tok.Token, ""); {
				case err == nil:
					ok.Add(1)
				case errors.Is(err, httpx.ErrTokenInvalid):
					refused.Add(1)
				default:
					t.Errorf("Consume: %v", err)
				}
			})
		}
	}
	wg.Wait()
	if ok.Load() != int64(n) || refused.Load() != int64(3*n) {
		t.Errorf("%d tokens × 4 concurrent consumptions: %d accepted, %d refused; want %d and %d", n, ok.Load(), refused.Load(), n, 3*n)
	}
}

// testBarrierOnCluster runs saga branches behind the Redis barrier on the cluster, each op delivered
// four times at once, across many gids (so many slots and every master): actions debit an account,
// compensations credit it back; some compensations arrive before their action (null compensation,
// then the late action is refused as hanging). The balances must add up exactly.
func testBarrierOnCluster(t *testing.T, cc redis.UniversalClient, sc scale) {
	ctx := context.Background()
	bar, err := barrier.NewRedis(cc, &barrier.RedisOptions{TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	debit := barrier.NewScript(`
local b = tonumber(redis.call('GET', KEYS[1]) or '0')
local a = tonumber(ARGV[1])
if b < a then return redis.error_reply('FAILURE: insufficient balance') end
redis.call('DECRBY', KEYS[1], a)
return 'debited'`)
	credit := barrier.NewScript(`redis.call('INCRBY', KEYS[1], tonumber(ARGV[1])); return 'credited'`)

	tag := testsvc.Name("acct")
	n := sc.pick(60, 600)
	const initial, amount = 1000, 7
	acct := func(i int) string { return fmt.Sprintf("{%s-%d}:balance", tag, i) }
	for i := range n {
		if err := cc.Set(ctx, acct(i), initial, time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
	}
	deliver := func(i int, op string, script *barrier.Script) {
		b, err := barrier.NewBranch(barrier.TransSaga, fmt.Sprintf("%s-gid-%d", tag, i), "01", op)
		if err != nil {
			t.Error(err)
			return
		}
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				bb := *b
				if _, err := bar.Call(ctx, &bb, &barrier.RedisCall{Script: script, Keys: []string{acct(i)}, Args: []any{amount}}); err != nil {
					t.Errorf("%s of %d: %v", op, i, err)
				}
			})
		}
		wg.Wait()
	}
	want := make([]int64, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			switch i % 3 {
			case 0: // action only
				deliver(i, barrier.OpAction, debit)
				want[i] = initial - amount
			case 1: // action, then compensation
				deliver(i, barrier.OpAction, debit)
				deliver(i, barrier.OpCompensate, credit)
				want[i] = initial
			case 2: // compensation first (null), then the late action (hanging: refused)
				deliver(i, barrier.OpCompensate, credit)
				deliver(i, barrier.OpAction, debit)
				want[i] = initial
			}
		})
	}
	wg.Wait()
	for i := range n {
		got, err := cc.Get(ctx, acct(i)).Int64()
		if err != nil || got != want[i] {
			t.Errorf("account %d: balance %d (%v), want %d", i, got, err, want[i])
		}
	}
}

// testFailoverStorm: three Guards (three "processes": each its own cluster client and database
// pool) over one record table on the shared MariaDB, a Redis lock and cache on the cluster, and a
// duplicate storm during which a master is killed (SIGKILL), its replica takes over, and the killed
// node comes back as a replica. Every key must run exactly once, whatever the lock saw: with
// FailOpen the Guards skip the unreachable lock and the database decides; without it they answer
// ErrLockUnavailable, the clients retry, and still nothing runs twice.
func testFailoverStorm(t *testing.T, c *cluster.RedisCluster, newClient func(*testing.T) redis.UniversalClient, failOpen bool, sc scale) {
	ctx := context.Background()
	const procs = 3
	table := testsvc.Name("idemkit_rc_")
	obs := &counter{}
	guards := make([]*idemkit.Guard, procs)
	for i := range guards {
		db := testsvc.MySQL(t, nil)
		if i == 0 {
			testsvc.DropTable(t, db, table)
		}
		sqlDB, _ := db.DB()
		sqlDB.SetMaxOpenConns(16)
		st, err := record.New(db, &record.Options{Table: table})
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			if err := st.CreateTable(ctx); err != nil {
				t.Fatal(err)
			}
		}
		lk := lock.New(newClient(t), &lock.Options{Prefix: table + ":"})
		// A release lost to the failover leaves its lock on the promoted replica until LockTTL runs
		// out, and duplicates of that key are answered "in flight" meanwhile: a short LockTTL bounds
		// the wait (see docs/SCALING.md).
		if guards[i], err = idemkit.New(st, &idemkit.Options{Locker: lk, FailOpen: failOpen, Lease: time.Minute,
			LockTTL: 3 * time.Second, Observer: obs}); err != nil {
			t.Fatal(err)
		}
	}

	var mu sync.Mutex
	runs := map[string]int{}
	var seq atomic.Int64
	var failovers, holds []time.Duration
	// met counts the calls that met a dead master: fail-open calls, or ErrLockUnavailable answers
	// without FailOpen.
	met := func() int64 {
		if failOpen {
			return obs.failOpen.Load()
		}
		return obs.lockErrs.Load()
	}
	// A round holds the replica back until wantMet calls have met the dead master (the first do
	// 1.3–2.5 s after the kill here), at most maxHold: well within the 20 s past which the replica
	// would refuse to be elected (see HoldFailover).
	const wantMet, maxHold = 5, 12 * time.Second
	s := storm{
		Procs: procs, Dup: 4, Workers: 16,
		Before: sc.pick(150, 1500), After: sc.pick(150, 3000),
		Do: func(ctx context.Context, p int, key string) (string, error) {
			res, err := guards[p].Do(ctx, idemkit.Call{Scope: "storm", Key: key}, func(context.Context) ([]byte, error) {
				mu.Lock()
				runs[key]++
				mu.Unlock()
				time.Sleep(time.Millisecond)
				return fmt.Appendf(nil, "%s@p%d#%d", key, p, seq.Add(1)), nil
			})
			return string(res.Value), err
		},
		Retry: func(err error) string {
			if failOpen && errors.Is(err, idemkit.ErrLockUnavailable) {
				return "" // fail-open must never report the lock
			}
			return classify(err)
		},
		// One failover in the quick run; at full scale every master in turn (the last one
		// killed is a replica promoted by an earlier failover). The victim's replica is held back
		// until the Guards have met the dead master: go-redis retries a command for about as long
		// as a 1 s cluster-node-timeout failover takes (dial retries × redirects), so left alone a
		// replica can take over before any call sees an error, and the storm proves nothing about
		// a Redis failure. In production the detection alone (cluster-node-timeout, 15 s by
		// default) outlasts those retries.
		Fault: func(ctx context.Context) error {
			for round := range sc.pick(1, 3) {
				roles, err := c.Topology(ctx)
				if err != nil {
					return err
				}
				var victim *cluster.RedisNode
				for _, r := range roles {
					if r.Master && r.Slots > 0 {
						victim = r.Node
						if r.Node.Index() == round { // a different master each round
							break
						}
					}
				}
				fctx, cancel := context.WithTimeout(ctx, time.Minute)
				defer cancel()
				release, err := c.HoldFailover(fctx, victim)
				if err != nil {
					return err
				}
				t0 := time.Now()
				before := met()
				if err := victim.Kill(); err != nil {
					return errors.Join(err, release(fctx))
				}
				for met()-before < wantMet && time.Since(t0) < maxHold {
					time.Sleep(20 * time.Millisecond)
				}
				held := time.Since(t0)
				holds = append(holds, held.Round(time.Millisecond))
				if err := release(fctx); err != nil {
					return err
				}
				if held >= maxHold {
					return fmt.Errorf("round %d: %d calls met the dead master %s in %s, want %d", round, met()-before, victim.Addr(), maxHold, wantMet)
				}
				if err := c.WaitFailover(fctx, victim); err != nil {
					return err
				}
				failovers = append(failovers, time.Since(t0).Round(time.Millisecond))
				if err := victim.Restart(fctx); err != nil {
					return err
				}
				if err := c.WaitHealthy(fctx); err != nil {
					return err
				}
			}
			return nil
		},
	}
	res := s.run(t, "k")
	t.Logf("%s; failovers (kill -9 of a master to a healthy cluster): %v, the replica held for the first %v", res, failovers, holds)
	t.Logf("executed %d, replayed %d (%d from the cache), insert conflicts %d, fail-open events %d",
		obs.executed.Load(), obs.replayed.Load(), obs.cached.Load(), obs.conflicts.Load(), obs.failOpen.Load())

	res.wantConsistent(t)
	mu.Lock()
	defer mu.Unlock()
	twice := runViolations(t, runs, res.Answers)
	if twice != 0 || len(runs) != res.Keys {
		t.Errorf("%d keys answered, %d ran, %d ran other than once", res.Keys, len(runs), twice)
	}
	// The record table agrees: one SUCCEEDED record per key, nothing left PROCESSING.
	var succeeded, other int64
	db := testsvc.MySQL(t, nil)
	if err := db.Raw("SELECT COUNT(*) FROM " + table + " WHERE status = 'SUCCEEDED'").Scan(&succeeded).Error; err != nil {
		t.Fatal(err)
	}
	if err := db.Raw("SELECT COUNT(*) FROM " + table + " WHERE status <> 'SUCCEEDED'").Scan(&other).Error; err != nil {
		t.Fatal(err)
	}
	if succeeded != int64(res.Keys) || other != 0 {
		t.Errorf("record table: %d SUCCEEDED, %d other; want %d and 0", succeeded, other, res.Keys)
	}
	if failOpen {
		if obs.failOpen.Load() == 0 {
			t.Errorf("no fail-open event: the storm never met the failover")
		}
	} else {
		if res.Retries["lock unavailable"] == 0 {
			t.Errorf("no ErrLockUnavailable answer: the storm never met the failover")
		}
		if obs.failOpen.Load() != 0 {
			t.Errorf("%d fail-open events with FailOpen off", obs.failOpen.Load())
		}
	}
	t.Logf("violations (keys run more or less than once): %d", twice)
}
