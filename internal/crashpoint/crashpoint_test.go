// Package crashpoint_test kills a process running one guarded call at each deterministic point of
// each mode, then retries the key from another process and checks the outcome against the README.
package crashpoint_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/httpx"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/record"
	"github.com/idemkit/idemkit/sweep"
)

const (
	envPoint   = "CP_POINT" // runs TestCrashPointChild
	envMode    = "CP_MODE"
	envTable   = "CP_TABLE"
	envBiz     = "CP_BIZ"
	envRedis   = "CP_REDIS"
	envKey     = "CP_KEY"
	envWD      = "CP_WATCHDOG"
	envFail    = "CP_FAIL" // the function fails (retryably) instead of succeeding
	envLockTTL = "CP_LOCKTTL"
	lease      = 1500 * time.Millisecond
	scope      = "cp"
)

var ctxb = context.Background()

// killer SIGKILLs the process at its point.
type killer string

func (k killer) at(p string) {
	if string(k) == p {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
}

// killStore is a Store that kills the process before or after the inner Store's finish, takeover or
// claim.
type killStore struct {
	idemkit.Store
	k      killer
	insert string // what an Insert is: "claim", or "finish" for DoTx's final record
}

func kind(rec *idemkit.Record, prev idemkit.Version) string {
	switch {
	case rec.Fence != prev.Fence:
		return "takeover"
	case rec.Status == idemkit.StatusProcessing:
		return "renew"
	}
	return "finish"
}

func (s killStore) Update(ctx context.Context, rec *idemkit.Record, prev idemkit.Version) error {
	w := kind(rec, prev)
	s.k.at(w + "-before")
	err := s.Store.Update(ctx, rec, prev)
	s.k.at(w + "-after")
	return err
}

func (s killStore) Insert(ctx context.Context, rec *idemkit.Record) error {
	w := s.insert
	s.k.at(w + "-before")
	err := s.Store.Insert(ctx, rec)
	s.k.at(w + "-after")
	return err
}

func (s killStore) Peek(ctx context.Context, scope, key string) (*idemkit.Record, error) {
	return s.Store.(idemkit.Peeker).Peek(ctx, scope, key)
}

// killLocker kills the process before or after the release that fills the cache.
type killLocker struct {
	idemkit.Locker
	k killer
}

func (l killLocker) Release(ctx context.Context, key, token string, result []byte, ttl time.Duration) error {
	l.k.at("fill-before")
	err := l.Locker.Release(ctx, key, token, result, ttl)
	l.k.at("fill-after")
	return err
}

type env struct {
	db    *gorm.DB
	s     *record.Store
	biz   string
	redis *redis.Client
}

func guard(t testing.TB, e env, st idemkit.Store, lk idemkit.Locker, watchdog, failOpen bool, lockTTL time.Duration) *idemkit.Guard {
	g, err := idemkit.New(st, &idemkit.Options{Locker: lk, Lease: lease, LockTTL: lockTTL, Watchdog: watchdog, FailOpen: failOpen})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// outcome of one call.
type outcome struct {
	val      string
	replayed bool
	err      error
	http     int
}

// call runs one call of mode for key with payload, the business inserting (key, payload) into biz
// and killing the process at k's point.
func call(e env, g *idemkit.Guard, st idemkit.Store, mode, key, payload string, k killer, slow, fail, refused bool) outcome {
	c := idemkit.Call{Scope: scope, Key: key, Fingerprint: "fp-" + payload}
	res := "r-" + payload
	pause := func() {
		if slow {
			time.Sleep(lease * 2 / 3) // lets the watchdog renew once
		}
	}
	ownTx := func(ctx context.Context) error {
		pause()
		if refused {
			return idemkit.Permanent(errors.New("insufficient funds"))
		}
		tx := e.db.WithContext(ctx).Begin()
		if err := tx.Exec("INSERT INTO "+e.biz+" (k, p) VALUES (?, ?)", key, payload).Error; err != nil {
			tx.Rollback()
			return err
		}
		k.at("fn-before-commit")
		if fail {
			tx.Rollback()
			return errors.New("retryable failure")
		}
		if err := tx.Commit().Error; err != nil {
			return err
		}
		k.at("fn-after-commit")
		return nil
	}
	inTx := func(ctx context.Context, tx *gorm.DB) error {
		pause()
		if refused {
			return idemkit.Permanent(errors.New("insufficient funds"))
		}
		if err := tx.Exec("INSERT INTO "+e.biz+" (k, p) VALUES (?, ?)", key, payload).Error; err != nil {
			return err
		}
		k.at("fn-before-commit")
		if fail {
			return errors.New("retryable failure")
		}
		return nil
	}
	switch mode {
	case "Do":
		r, err := g.Do(ctxb, c, func(ctx context.Context) ([]byte, error) { return []byte(res), ownTx(ctx) })
		return outcome{val: string(r.Value), replayed: r.Replayed, err: err}
	case "Mark":
		return outcome{err: g.Mark(ctxb, c, ownTx)}
	case "Tx":
		r, err := e.s.Tx(ctxb, g, c, func(ctx context.Context, tx *gorm.DB) ([]byte, error) { return []byte(res), inTx(ctx, tx) })
		return outcome{val: string(r.Value), replayed: r.Replayed, err: err}
	case "TxMark":
		return outcome{err: e.s.TxMark(ctxb, g, c, inTx)}
	case "DoTx":
		var r idemkit.Result
		err := e.db.Transaction(func(tx *gorm.DB) error {
			var err error
			var txs idemkit.Store = e.s.WithTx(tx)
			if _, ok := st.(killStore); ok {
				txs = killStore{txs, k, "finish"}
			}
			r, err = g.DoTx(ctxb, txs, c, func(ctx context.Context) ([]byte, error) { return []byte(res), inTx(ctx, tx) })
			k.at("dotx-returned")
			return err
		})
		k.at("caller-committed")
		return outcome{val: string(r.Value), replayed: r.Replayed, err: err}
	case "http":
		mw, err := httpx.New(g, &httpx.Options{Scope: func(*http.Request) string { return scope }})
		if err != nil {
			return outcome{err: err}
		}
		h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if err := ownTx(r.Context()); err != nil {
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, res)
		}))
		req := httptest.NewRequest(http.MethodPost, "/pay", strings.NewReader(payload))
		req.Header.Set(httpx.DefaultHeader, key)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		var rerr error
		if rec.Header().Get(httpx.ReplayedHeader) == "true" {
			rerr = errReplayedHTTP
		}
		return outcome{val: rec.Body.String(), http: rec.Code, err: rerr}
	}
	return outcome{err: fmt.Errorf("mode %q", mode)}
}

var errReplayedHTTP = errors.New("replayed")

func open(t testing.TB, table, biz, redisAddr string) env {
	db := testsvc.MySQL(t, nil)
	if os.Getenv("CP_MULTI") == "1" {
		db = testsvc.MySQLMulti(t, nil)
	}
	if os.Getenv("CP_PG") == "1" {
		db = testsvc.Postgres(t, nil)
	}
	s, err := record.New(db, &record.Options{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	o := &redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1, DialTimeout: time.Second}
	rc := redis.NewClient(o)
	t.Cleanup(func() { _ = rc.Close() })
	return env{db: db, s: s, biz: biz, redis: rc}
}

// TestCrashPointChild is the process TestCrashPoints kills.
func TestCrashPointChild(t *testing.T) {
	point := os.Getenv(envPoint)
	if point == "" {
		t.Skip("run by TestCrashPoints")
	}
	e := open(t, os.Getenv(envTable), os.Getenv(envBiz), os.Getenv(envRedis))
	k := killer(point)
	st := idemkit.Store(killStore{e.s, k, "claim"})
	lk := killLocker{lock.New(e.redis, nil), k}
	mode := os.Getenv(envMode)
	wd := os.Getenv(envWD) == "1"
	lockTTL, _ := time.ParseDuration(os.Getenv(envLockTTL))
	g := guard(t, e, st, lk, wd, false, lockTTL)
	if mode == "Tx" || mode == "TxMark" {
		g = guard(t, e, e.s, lk, wd, false, lockTTL)
	}
	out := call(e, g, st, mode, os.Getenv(envKey), "A", k, wd, os.Getenv(envFail) == "1", false)
	fmt.Printf("RETURNED without reaching %s: %q %v\n", point, out.val, out.err)
}

type crashCase struct {
	mode, point  string
	fail         bool   // the killed call's function fails
	first        string // a point the key is killed at first (for takeovers)
	watchdog     bool
	failOpen     bool // Redis is stopped before the retry, which runs FailOpen
	emptyRedis   bool // Redis lost its data before the retry (restarted empty)
	lockTTL      time.Duration
	retryRefused bool // the retry's function fails permanently (a second debit, refused)
	swept        bool // the sweeper's recover_stale runs once the lease ran out, before the retry
}

func (c crashCase) name() string {
	n := c.mode + "/" + c.point
	if c.first != "" {
		n = c.mode + "/" + c.first + "+" + c.point
	}
	if c.fail {
		n += "/failing"
	}
	if c.watchdog {
		n += "/watchdog"
	}
	if c.failOpen {
		n += "/failopen-redis-down"
	}
	if c.emptyRedis {
		n += "/redis-restarted-empty"
	}
	if c.lockTTL != 0 {
		n += "/locktll-" + c.lockTTL.String()
	}
	if c.retryRefused {
		n += "/retry-refused"
	}
	if c.swept {
		n += "/swept"
	}
	return n
}

func cases() []crashCase {
	var out []crashCase
	points := map[string][]string{
		"Do":     {"fn-before-commit", "fn-after-commit", "finish-before", "finish-after", "fill-before", "fill-after"},
		"http":   {"fn-before-commit", "fn-after-commit", "finish-before", "finish-after", "fill-before", "fill-after"},
		"Mark":   {"claim-after", "fn-before-commit", "fn-after-commit", "fill-before", "fill-after"},
		"Tx":     {"fn-before-commit", "fill-before", "fill-after"},
		"TxMark": {"fn-before-commit", "fill-before", "fill-after"},
		"DoTx":   {"fn-before-commit", "finish-before", "finish-after", "dotx-returned", "caller-committed", "fill-before"},
	}
	for _, m := range []string{"Do", "Mark", "Tx", "TxMark", "DoTx", "http"} {
		for _, p := range points[m] {
			for _, v := range []crashCase{{}, {watchdog: true}, {failOpen: true}, {emptyRedis: true}} {
				v.mode, v.point = m, p
				out = append(out, v)
			}
		}
	}
	for _, m := range []string{"Do", "http"} {
		out = append(out, crashCase{mode: m, first: "fn-before-commit", point: "takeover-before"},
			crashCase{mode: m, first: "fn-before-commit", point: "takeover-after"},
			crashCase{mode: m, first: "fn-before-commit", point: "takeover-after", watchdog: true})
	}
	out = append(out,
		crashCase{mode: "Mark", point: "finish-before", fail: true},
		crashCase{mode: "Mark", point: "finish-after", fail: true},
		crashCase{mode: "Mark", first: "finish-after", point: "takeover-after", fail: true},
		crashCase{mode: "Do", point: "finish-after", fail: true},
		crashCase{mode: "Do", first: "finish-after", point: "takeover-after", fail: true},
		crashCase{mode: "Tx", point: "fill-before", fail: true},
		crashCase{mode: "Do", point: "fn-after-commit", lockTTL: 8 * lease, swept: true},
		crashCase{mode: "http", point: "fn-before-commit", lockTTL: 8 * lease, swept: true},
		crashCase{mode: "Do", point: "fn-before-commit", lockTTL: 8 * lease, watchdog: true, swept: true},
		crashCase{mode: "Tx", point: "fill-before", retryRefused: true},
		crashCase{mode: "Tx", point: "fill-before", retryRefused: true, emptyRedis: true},
		crashCase{mode: "Tx", point: "fill-before", retryRefused: true, failOpen: true},
		crashCase{mode: "DoTx", point: "caller-committed", retryRefused: true},
		crashCase{mode: "DoTx", point: "caller-committed", retryRefused: true, emptyRedis: true},
		crashCase{mode: "Do", point: "fill-before", retryRefused: true, emptyRedis: true},
		crashCase{mode: "Do", point: "renew-after", watchdog: true},
		crashCase{mode: "http", point: "renew-after", watchdog: true},
		crashCase{mode: "Do", point: "fn-before-commit", lockTTL: 3 * lease},
		crashCase{mode: "Do", point: "fn-before-commit", lockTTL: lease / 3},
		crashCase{mode: "Do", point: "fn-before-commit", lockTTL: lease / 3, watchdog: true},
		crashCase{mode: "Mark", point: "fn-before-commit", lockTTL: lease / 3},
		crashCase{mode: "Tx", point: "fn-before-commit", lockTTL: lease / 3, watchdog: true},
		crashCase{mode: "TxMark", point: "fn-before-commit", lockTTL: 3 * lease, watchdog: true},
		crashCase{mode: "Tx", first: "fill-before", point: "fn-before-commit", fail: true},
		crashCase{mode: "TxMark", point: "fill-before", fail: true},
		crashCase{mode: "DoTx", point: "fill-before", fail: true},
		crashCase{mode: "DoTx", point: "caller-committed", fail: true},
		crashCase{mode: "DoTx", first: "caller-committed", point: "caller-committed", fail: true},
	)
	return out
}

// TestCrashPoints: for each mode and each crash point, a child process runs one guarded call of key
// with payload A and is SIGKILLed there; then this process retries the key with payload A until it
// gets a final answer, and once with payload B.
func TestCrashPoints(t *testing.T) {
	if testing.Short() {
		t.Skip("kills child processes")
	}
	rp := testsvc.StartRedis(t)
	empty := testsvc.StartRedis(t) // a Redis that lost its data: nothing but retries' keys
	base := open(t, testsvc.Name("t_rec_"), testsvc.Name("t_biz_"), rp.Addr())
	testsvc.DropTable(t, base.db, base.s.Table())
	testsvc.DropTable(t, base.db, base.biz)
	if err := base.s.CreateTable(ctxb); err != nil {
		t.Fatal(err)
	}
	if err := base.db.Exec("CREATE TABLE " + base.biz + " (k VARCHAR(64) NOT NULL, p VARCHAR(8) NOT NULL)").Error; err != nil {
		t.Fatal(err)
	}
	for i, c := range cases() {
		if only := os.Getenv("CP_ONLY"); only != "" && !strings.Contains(c.name(), only) {
			continue
		}
		t.Run(c.name(), func(t *testing.T) {
			t.Parallel()
			key := fmt.Sprintf("k%d-%s", i, testsvc.Name(""))
			child := func(point string, fail bool) string {
				cmd := exec.Command(os.Args[0], "-test.run=^TestCrashPointChild$", "-test.count=1")
				cmd.Env = append(os.Environ(), envPoint+"="+point, envMode+"="+c.mode, envTable+"="+base.s.Table(),
					envBiz+"="+base.biz, envRedis+"="+rp.Addr(), envKey+"="+key)
				if c.watchdog {
					cmd.Env = append(cmd.Env, envWD+"=1")
				}
				if fail {
					cmd.Env = append(cmd.Env, envFail+"=1")
				}
				if c.lockTTL != 0 {
					cmd.Env = append(cmd.Env, envLockTTL+"="+c.lockTTL.String())
				}
				var out bytes.Buffer
				cmd.Stdout, cmd.Stderr = &out, &out
				err := cmd.Run()
				var ee *exec.ExitError
				if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
					t.Fatalf("child at %s not killed (%v):\n%s", point, err, out.String())
				}
				return point
			}
			if c.first != "" {
				child(c.first, c.fail)
				time.Sleep(lease + 200*time.Millisecond)
			}
			child(c.point, c.fail && c.first == "")
			killed := time.Now()
			effects := func() int {
				var n int64
				if err := base.db.Raw("SELECT COUNT(*) FROM "+base.biz+" WHERE k = ?", key).Scan(&n).Error; err != nil {
					t.Fatal(err)
				}
				return int(n)
			}
			state := func() string {
				rec, err := base.s.Get(ctxb, scope, key)
				if errors.Is(err, idemkit.ErrNotFound) {
					return "none"
				}
				if err != nil {
					t.Fatal(err)
				}
				s := string(rec.Status) + fmt.Sprintf("@%d", rec.Fence)
				if rec.Status == idemkit.StatusProcessing && rec.LeaseUntil.Before(time.Now()) {
					s += "(lease expired)"
				}
				return s
			}
			redisKeys := func() string {
				if c.failOpen {
					return "-"
				}
				ks, err := base.redis.Keys(ctxb, "*"+key+"*").Result()
				if err != nil {
					t.Fatal(err)
				}
				var parts []string
				for _, k := range ks {
					ttl, err := base.redis.PTTL(ctxb, k).Result()
					if err != nil {
						t.Fatal(err)
					}
					if ttl < 0 {
						t.Errorf("Redis key %s has no expiry (%v)", k, ttl)
					}
					v, _ := base.redis.Get(ctxb, k).Result()
					kindOf := "lock"
					if strings.Contains(v, "r-") || ttl > time.Hour {
						kindOf = "cached"
					}
					parts = append(parts, fmt.Sprintf("%s %s", kindOf, ttl.Round(100*time.Millisecond)))
				}
				return strings.Join(parts, ",")
			}
			if c.swept {
				time.Sleep(lease + 200*time.Millisecond)
				for _, task := range sweep.RecordTasksWithLocker(base.s, lock.New(base.redis, nil)) {
					if task.Name == "recover_stale" {
						n, err := task.Run(ctxb, time.Now(), 100)
						t.Logf("recover_stale: %d, %v", n, err)
					}
				}
				killed = time.Now()
			}
			eff0, st0, rk0 := effects(), state(), redisKeys()

			e := base
			var lk idemkit.Locker = lock.New(e.redis, nil)
			if c.failOpen { // Redis is gone: its address refuses connections
				down := redis.NewClient(&redis.Options{Addr: deadAddr(t), MaxRetries: -1, DialerRetries: 1, DialTimeout: time.Second})
				defer down.Close()
				lk = lock.New(down, nil)
			}
			if c.emptyRedis {
				fresh := redis.NewClient(empty.Options())
				defer fresh.Close()
				lk = lock.New(fresh, nil)
			}
			g := guard(t, e, e.s, lk, c.watchdog, c.failOpen, c.lockTTL)
			var lastInFlight, firstRetryAfter time.Duration
			var o outcome
			obEarly := call(e, g, e.s, c.mode, key, "B", "", false, false, false) // another payload, at once
			effB := 0
			if err := base.db.Raw("SELECT COUNT(*) FROM "+base.biz+" WHERE k = ? AND p = 'B'", key).Scan(&effB).Error; err != nil {
				t.Fatal(err)
			}
			held := st0 != "none" || !c.failOpen && !c.emptyRedis && strings.Contains(rk0, "lock")
			if effB != 0 && held {
				t.Errorf("payload B ran at once after the kill (record %s)", st0)
			}
			var tries int
			// A bound on a wait, not a timing: the key is in flight until max(Lease, LockTTL) after
			// the kill; only one that stays so ten times as long fails.
			for deadline := time.Now().Add(10 * max(lease, c.lockTTL)); ; tries++ {
				o = call(e, g, e.s, c.mode, key, "A", "", false, false, c.retryRefused)
				var inf *idemkit.InFlightError
				inFlight := errors.As(o.err, &inf) || o.http == http.StatusConflict
				if !inFlight {
					break
				}
				if firstRetryAfter == 0 && inf != nil {
					firstRetryAfter = inf.RetryAfter
				}
				lastInFlight = time.Since(killed)
				if time.Now().After(deadline) {
					t.Errorf("still in flight %v after the kill", time.Since(killed))
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			eff1, st1 := effects(), state()
			ob := call(e, g, e.s, c.mode, key, "B", "", false, false, false)
			eff2, st2, rk2 := effects(), state(), redisKeys()
			ans := describe(o)
			line := fmt.Sprintf("%-58s | after kill: %s, %d effect(s), redis[%s] | B at once: %s | retry A: %s (in flight %v, first RetryAfter %v, %d tries) → %s, effects %d | B: %s, effects %d | end %s redis[%s]",
				c.name(), st0, eff0, rk0, describe(obEarly), ans, lastInFlight.Round(100*time.Millisecond), firstRetryAfter.Round(100*time.Millisecond), tries, st1, eff1, describe(ob), eff2, st2, rk2)
			t.Log(line)

			// What the README promises.
			if strings.HasPrefix(st2, "PROCESSING") {
				t.Errorf("left PROCESSING: %s", st2)
			}
			if eff2 != eff1 {
				t.Errorf("payload B ran the business: %d → %d", eff1, eff2)
			}
			switch c.mode {
			case "Tx", "TxMark", "DoTx":
				if eff1 > 1 {
					t.Errorf("Tx mode: %d effects", eff1)
				}
			}
			final := strings.HasPrefix(st0, "SUCCEEDED") || strings.HasPrefix(st0, "REJECTED")
			if final && c.mode != "Mark" && eff1 != eff0 {
				t.Errorf("finished record (%s) ran again: effects %d → %d", st0, eff0, eff1)
			}
			if final && c.retryRefused && !o.replayed && !errors.Is(o.err, idemkit.ErrRollbackReplayed) {
				t.Errorf("a retry whose function fails got %s, not the stored answer", describe(o))
			}
			// The answers. Payload B run at once (nothing of A committed or held the key) owns the key:
			// A is then another payload's retry, and B's duplicate gets B's answer. Otherwise A gets
			// its own answer, run or replayed, and B a payload mismatch.
			ranB := effB != 0
			switch {
			case ranB:
				if !mismatched(o) {
					t.Errorf("retry A after B ran: %s, want a payload mismatch", ans)
				}
			case c.mode == "Mark" || c.mode == "TxMark":
				if o.err != nil && !errors.Is(o.err, idemkit.ErrDuplicate) {
					t.Errorf("retry A: %s, want success or a duplicate", ans)
				}
			case c.retryRefused && !final:
				// its function refused: that is the answer
			case c.mode == "http":
				if o.http != http.StatusCreated || o.val != "r-A" {
					t.Errorf("retry A: %s, want 201 \"r-A\"", ans)
				}
			default:
				if o.err != nil && !errors.Is(o.err, idemkit.ErrRollbackReplayed) || o.val != "r-A" {
					t.Errorf("retry A: %s, want \"r-A\"", ans)
				}
			}
			if mismatched(ob) == ranB {
				t.Errorf("B after retry A: %s (B ran at once: %v)", describe(ob), ranB)
			}
		})
	}
}

// deadAddr returns a loopback address nothing listens on.
func deadAddr(t testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// mismatched reports whether o is the answer to another payload than the key's.
func mismatched(o outcome) bool {
	return errors.Is(o.err, idemkit.ErrPayloadMismatch) || o.http == http.StatusUnprocessableEntity
}

func describe(o outcome) string {
	var inf *idemkit.InFlightError
	switch {
	case o.http != 0 && errors.Is(o.err, errReplayedHTTP):
		return fmt.Sprintf("http %d replayed %q", o.http, o.val)
	case o.http != 0:
		return fmt.Sprintf("http %d %q", o.http, trim(o.val))
	case errors.As(o.err, &inf):
		return "in flight"
	case errors.Is(o.err, idemkit.ErrPayloadMismatch):
		return "mismatch"
	case errors.Is(o.err, idemkit.ErrDuplicate):
		return "duplicate"
	case o.err != nil:
		return "error: " + trim(o.err.Error())
	}
	if o.replayed {
		return fmt.Sprintf("replayed %q", o.val)
	}
	return fmt.Sprintf("ran %q", o.val)
}

func trim(s string) string {
	if len(s) > 60 {
		return s[:60] + "…"
	}
	return s
}
