package dtmhttp_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/barrier"
	"github.com/idemkit/idemkit/dtmhttp"
	"github.com/idemkit/idemkit/internal/testsvc"
)

// TestGormBranch drives saga step handlers on MariaDB through the branch protocol by hand: what each
// delivery is answered, what the barrier decided, and what reached the database.
func TestGormBranch(t *testing.T) {
	for _, mode := range []struct {
		name string
		cfg  *gorm.Config
	}{{"default", nil}, {"PrepareStmt", &gorm.Config{Logger: logger.Discard, PrepareStmt: true}}} {
		t.Run(mode.name, func(t *testing.T) {
			t.Run("SuccessThenDuplicate", func(t *testing.T) {
				k := setup(t, mode.cfg, nil)
				action := k.b.Handle(barrier.OpAction, dtmhttp.Gorm(k.bar, k.adjust(-1)))
				gid := testsvc.Name("gid-")
				c := call{"saga", gid, "01", "action", `{"amount":30}`}
				expect(t, action, c, 200, `{"dtm_result":"SUCCESS"}`)
				expect(t, action, c, 200, `{"dtm_result":"SUCCESS"}`)
				expectOutcomes(t, k.j, "action:200:proceed", "action:200:duplicate")
				if k.runCount() != 1 || k.balance(t) != initBalance-30 {
					t.Fatalf("business ran %d times, balance %d", k.runCount(), k.balance(t))
				}
			})

			t.Run("PermanentFailureThenNullCompensationThenHanging", func(t *testing.T) {
				k := setup(t, mode.cfg, nil)
				action := k.b.Handle(barrier.OpAction, dtmhttp.Gorm(k.bar, k.adjust(-1)))
				compensate := k.b.Handle(barrier.OpCompensate, dtmhttp.Gorm(k.bar, k.adjust(+1)))
				gid := testsvc.Name("gid-")
				body := expect(t, action, call{"saga", gid, "01", "action", `{"amount":1000}`}, 409, `"dtm_result":"FAILURE"`)
				if !strings.Contains(body, "insufficient balance") {
					t.Fatalf("409 body %s does not say why", body)
				}
				// The failed action's transaction rolled back with its barrier rows: its compensation
				// is a null compensation, and a late redelivery of the action hangs.
				expect(t, compensate, call{"saga", gid, "01", "compensate", `{"amount":1000}`}, 200, "SUCCESS")
				expect(t, action, call{"saga", gid, "01", "action", `{"amount":1000}`}, 200, "SUCCESS")
				expectOutcomes(t, k.j, "action:409:proceed", "compensate:200:null-compensation", "action:200:hanging")
				if k.runCount() != 1 || k.balance(t) != initBalance {
					t.Fatalf("business ran %d times, balance %d", k.runCount(), k.balance(t))
				}
			})

			t.Run("CompensationMustNotFail", func(t *testing.T) {
				k := setup(t, mode.cfg, nil)
				action := k.b.Handle(barrier.OpAction, dtmhttp.Gorm(k.bar, k.adjust(-1)))
				broken := true
				compensate := k.b.Handle(barrier.OpCompensate, dtmhttp.Gorm(k.bar, func(ctx context.Context, tx *gorm.DB, p transfer) error {
					if broken {
						return idemkit.Permanent(errors.New("refund rejected"))
					}
					return k.adjust(+1)(ctx, tx, p)
				}))
				gid := testsvc.Name("gid-")
				expect(t, action, call{"saga", gid, "01", "action", `{"amount":30}`}, 200, "SUCCESS")
				body := expect(t, compensate, call{"saga", gid, "01", "compensate", `{"amount":30}`}, 500, "refund rejected")
				if strings.Contains(body, "FAILURE") || strings.Contains(body, "dtm_result") {
					t.Fatalf("500 body %s carries a DTM result", body)
				}
				if log := k.j.log(); !strings.Contains(log, "level=ERROR") || !strings.Contains(log, "must not fail permanently") {
					t.Fatalf("no error logged for a failing compensation:\n%s", log)
				}
				// Fixed and redelivered: the barrier rows of the failed attempt were rolled back, so
				// the compensation runs now.
				broken = false
				expect(t, compensate, call{"saga", gid, "01", "compensate", `{"amount":30}`}, 200, "SUCCESS")
				expectOutcomes(t, k.j, "action:200:proceed", "compensate:500:proceed", "compensate:200:proceed")
				if k.balance(t) != initBalance {
					t.Fatalf("balance %d after compensation", k.balance(t))
				}
			})

			t.Run("MalformedPayload", func(t *testing.T) {
				k := setup(t, mode.cfg, &dtmhttp.Options{MaxBody: 64})
				action := k.b.Handle(barrier.OpAction, dtmhttp.Gorm(k.bar, k.adjust(-1)))
				compensate := k.b.Handle(barrier.OpCompensate, dtmhttp.Gorm(k.bar, k.adjust(+1)))
				gid := testsvc.Name("gid-")
				expect(t, action, call{"saga", gid, "01", "action", `{"amount":"thirty"}`}, 409, "malformed branch payload")
				big := `{"amount":1,"pad":"` + strings.Repeat("x", 100) + `"}`
				expect(t, action, call{"saga", gid, "02", "action", big}, 409, "larger than 64 bytes")
				// The compensation of a step whose action failed on its payload has nothing to undo:
				// Gorm decodes only when the barrier lets the call through.
				expect(t, compensate, call{"saga", gid, "01", "compensate", `{"amount":"thirty"}`}, 200, "SUCCESS")
				// A malformed payload of a compensation that must run is a bug: 500, retried.
				expect(t, action, call{"saga", gid, "03", "action", `{"amount":5}`}, 200, "SUCCESS")
				expect(t, compensate, call{"saga", gid, "03", "compensate", `{"amount":[]}`}, 500, "malformed branch payload")
				expectOutcomes(t, k.j, "action:409:proceed", "action:409:-", "compensate:200:null-compensation",
					"action:200:proceed", "compensate:500:proceed")
			})

			t.Run("BadRequests", func(t *testing.T) {
				k := setup(t, mode.cfg, nil)
				action := k.b.Handle(barrier.OpAction, dtmhttp.Gorm(k.bar, k.adjust(-1)))
				gid := testsvc.Name("gid-")
				expect(t, action, call{"saga", gid, "", "action", `{"amount":30}`}, 400, "missing branch_id")
				expect(t, action, call{"saga", gid, "01", "compensate", `{"amount":30}`}, 400, "not served by this handler")
				if k.runCount() != 0 {
					t.Fatalf("business ran %d times", k.runCount())
				}
			})

			t.Run("InfrastructureError", func(t *testing.T) {
				k := setup(t, mode.cfg, nil)
				action := k.b.Handle(barrier.OpAction, dtmhttp.Gorm(k.bar, func(ctx context.Context, tx *gorm.DB, p transfer) error {
					return tx.Exec("UPDATE no_such_table_" + testsvc.Name("") + " SET x = 1").Error
				}))
				gid := testsvc.Name("gid-")
				body := expect(t, action, call{"saga", gid, "01", "action", `{"amount":30}`}, 500, "no_such_table")
				if strings.Contains(body, "dtm_result") {
					t.Fatalf("500 body %s carries a DTM result", body)
				}
			})
		})
	}
}

// TestConcurrentRedeliveryIsInFlight: while one delivery of a branch op runs, a second one of the same
// op is answered 425 at once by the lock, instead of waiting on the barrier row; once the first is
// done, the next delivery is a duplicate.
func TestConcurrentRedeliveryIsInFlight(t *testing.T) {
	k := setup(t, nil, nil)
	entered, proceed := make(chan struct{}), make(chan struct{})
	action := k.b.Handle(barrier.OpAction, dtmhttp.Gorm(k.bar, func(ctx context.Context, tx *gorm.DB, p transfer) error {
		close(entered)
		<-proceed
		return k.adjust(-1)(ctx, tx, p)
	}))
	gid := testsvc.Name("gid-")
	c := call{"saga", gid, "01", "action", `{"amount":30}`}
	var wg sync.WaitGroup
	wg.Add(1)
	var firstCode int
	go func() {
		defer wg.Done()
		firstCode, _ = deliver(t, action, c)
	}()
	<-entered
	rec := httptest.NewRecorder()
	action.ServeHTTP(rec, c.request())
	if rec.Code != http.StatusTooEarly || !strings.Contains(rec.Body.String(), `"dtm_result":"ONGOING"`) {
		t.Fatalf("concurrent redelivery answered %d %s, want 425 ONGOING", rec.Code, rec.Body)
	}
	if ra := rec.Header().Get("Retry-After"); ra == "" || ra == "0" {
		t.Fatalf("Retry-After %q", ra)
	}
	close(proceed)
	wg.Wait()
	if firstCode != http.StatusOK {
		t.Fatalf("first delivery answered %d", firstCode)
	}
	expect(t, action, c, 200, "SUCCESS")
	expectOutcomes(t, k.j, "action:425:-", "action:200:proceed", "action:200:duplicate")
	if k.runCount() != 1 || k.balance(t) != initBalance-30 {
		t.Fatalf("business ran %d times, balance %d", k.runCount(), k.balance(t))
	}
}

// TestLockHeldElsewhere: a lock taken by another token on the branch's key (Branches.LockKey) makes
// every delivery 425 until it is released; the business never runs meanwhile.
func TestLockHeldElsewhere(t *testing.T) {
	k := setup(t, nil, nil)
	try := k.b.Handle(barrier.OpTry, dtmhttp.Gorm(k.bar, k.adjust(-1)))
	gid := testsvc.Name("gid-")
	key := k.b.LockKey(gid, "01", "try")
	if _, err := k.locker.Acquire(ctxb, key, "someone-else", time.Minute); err != nil {
		t.Fatal(err)
	}
	c := call{"tcc", gid, "01", "try", `{"amount":30}`}
	expect(t, try, c, 425, "ONGOING")
	expect(t, try, c, 425, "ONGOING")
	if err := k.locker.Release(ctxb, key, "someone-else", nil, 0); err != nil {
		t.Fatal(err)
	}
	expect(t, try, c, 200, "SUCCESS")
	expectOutcomes(t, k.j, "try:425:-", "try:425:-", "try:200:proceed")
	if k.runCount() != 1 {
		t.Fatalf("business ran %d times", k.runCount())
	}
}

// TestBusinessInFlight: a business that itself meets an in-flight key (a Guard inside) is answered 425.
func TestBusinessInFlight(t *testing.T) {
	k := setup(t, nil, nil)
	action := k.b.Handle(barrier.OpAction, func(ctx context.Context, req *dtmhttp.Request) (barrier.Outcome, error) {
		return 0, fmt.Errorf("reserving stock: %w", &idemkit.InFlightError{RetryAfter: 2500 * time.Millisecond})
	})
	rec := httptest.NewRecorder()
	action.ServeHTTP(rec, call{"saga", testsvc.Name("gid-"), "01", "action", `{}`}.request())
	if rec.Code != 425 || rec.Header().Get("Retry-After") != "3" {
		t.Fatalf("answered %d Retry-After %q", rec.Code, rec.Header().Get("Retry-After"))
	}
}

// flakyLocker fails every Acquire.
type flakyLocker struct{ idemkit.Locker }

var errLockDown = errors.New("lock server down")

func (flakyLocker) Acquire(context.Context, string, string, time.Duration) ([]byte, error) {
	return nil, errLockDown
}

func (flakyLocker) Release(context.Context, string, string, []byte, time.Duration) error {
	return errLockDown
}

func TestLockerFailure(t *testing.T) {
	for _, failOpen := range []bool{false, true} {
		t.Run(fmt.Sprintf("FailOpen=%v", failOpen), func(t *testing.T) {
			k := setup(t, nil, &dtmhttp.Options{Locker: flakyLocker{}, FailOpen: failOpen})
			action := k.b.Handle(barrier.OpAction, dtmhttp.Gorm(k.bar, k.adjust(-1)))
			c := call{"saga", testsvc.Name("gid-"), "01", "action", `{"amount":30}`}
			if failOpen {
				expect(t, action, c, 200, "SUCCESS") // the barrier alone
				expect(t, action, c, 200, "SUCCESS")
				expectOutcomes(t, k.j, "action:200:proceed", "action:200:duplicate")
				return
			}
			expect(t, action, c, 500, "lock server down")
			if k.runCount() != 0 {
				t.Fatalf("business ran %d times without its lock", k.runCount())
			}
		})
	}
}

// lostReplyLocker's Acquire takes effect, but its reply is lost (a read timeout).
type lostReplyLocker struct{ idemkit.Locker }

func (l lostReplyLocker) Acquire(ctx context.Context, key, token string, ttl time.Duration) ([]byte, error) {
	if _, err := l.Locker.Acquire(ctx, key, token, ttl); err != nil {
		return nil, err
	}
	return nil, errors.New("read tcp 127.0.0.1:50000->127.0.0.1:6379: i/o timeout")
}

// TestLockWhoseReplyWasLostIsReleased: a lock an Acquire took although its reply was lost was never
// released, so DTM's retries of the branch were answered 425 until LockTTL ran out.
func TestLockWhoseReplyWasLostIsReleased(t *testing.T) {
	for _, failOpen := range []bool{false, true} {
		t.Run(fmt.Sprintf("FailOpen=%v", failOpen), func(t *testing.T) {
			k := setup(t, nil, nil)
			lost, err := dtmhttp.New(&dtmhttp.Options{Locker: lostReplyLocker{k.locker}, FailOpen: failOpen, LockTTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			c := call{"saga", testsvc.Name("gid-"), "01", "action", `{"amount":30}`}
			rec := httptest.NewRecorder()
			lost.Handle(barrier.OpAction, dtmhttp.Gorm(k.bar, k.adjust(-1))).ServeHTTP(rec, c.request())
			if want := map[bool]int{false: 500, true: 200}[failOpen]; rec.Code != want {
				t.Fatalf("delivery whose lock reply was lost answered %d %s, want %d", rec.Code, rec.Body, want)
			}
			// DTM's retry, through a healthy Locker (k.b shares k.locker and the key layout).
			action := k.b.Handle(barrier.OpAction, dtmhttp.Gorm(k.bar, k.adjust(-1)))
			for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				rec := httptest.NewRecorder()
				action.ServeHTTP(rec, c.request())
				if rec.Code == http.StatusOK {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the retry still answers %d %s 2 s later", rec.Code, rec.Body)
				}
			}
			if k.runCount() != 1 {
				t.Fatalf("business ran %d times, want 1", k.runCount())
			}
		})
	}
}

// TestPanic: a panicking business rolls back, releases the lock, answers a complete 500 and the panic
// reaches the server's recoverer with its original value; without a recoverer net/http's own recovery
// closes the connection, and the client still has the whole 500.
func TestPanic(t *testing.T) {
	k := setup(t, nil, nil)
	var exploded atomic.Bool
	action := k.b.Handle(barrier.OpAction, dtmhttp.Gorm(k.bar, func(ctx context.Context, tx *gorm.DB, p transfer) error {
		if err := k.adjust(-1)(ctx, tx, p); err != nil {
			return err
		}
		if exploded.CompareAndSwap(false, true) {
			panic("business exploded")
		}
		return nil
	}))
	var mu sync.Mutex
	var recovered []any
	recoverer := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			defer func() {
				if v := recover(); v != nil {
					mu.Lock()
					recovered = append(recovered, v)
					mu.Unlock()
				}
			}()
			next.ServeHTTP(w, r)
		})
	}
	gid := testsvc.Name("gid-")
	c := call{"saga", gid, "01", "action", `{"amount":30}`}
	send := func(srv *httptest.Server) (int, string) {
		t.Helper()
		r := c.request()
		req, _ := http.NewRequest(r.Method, srv.URL+r.URL.RequestURI(), strings.NewReader(c.body))
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("reading the answer: %v", err)
		}
		return resp.StatusCode, string(body)
	}

	withRecoverer := httptest.NewServer(recoverer(action))
	defer withRecoverer.Close()
	if code, body := send(withRecoverer); code != 500 || !strings.Contains(body, "panic in branch business") {
		t.Fatalf("panicking business answered %d %s", code, body)
	}
	// The recoverer's deferred recover runs after the 500 reached the client: wait for it, and never
	// fail while holding mu (the server's Close would then wait for a handler blocked on it).
	seen := func() []any {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(recovered)
	}
	for deadline := time.Now().Add(5 * time.Second); len(seen()) == 0 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	if got := seen(); len(got) != 1 || got[0] != "business exploded" {
		t.Fatalf("recoverer saw %v", got)
	}
	if k.balance(t) != initBalance {
		t.Fatalf("balance %d: the panicking transaction was not rolled back", k.balance(t))
	}

	// Without a recoverer: net/http recovers, logs and closes the connection after the flushed 500.
	exploded.Store(false)
	bare := httptest.NewUnstartedServer(action)
	bare.Config.ErrorLog = log.New(io.Discard, "", 0)
	bare.Start()
	defer bare.Close()
	if code, body := send(bare); code != 500 || !strings.Contains(body, "panic in branch business") {
		t.Fatalf("panicking business without recoverer answered %d %s", code, body)
	}
	// Its event too is observed after the flushed 500 reached the client: wait for it, so that the
	// redelivery's event comes after it.
	for deadline := time.Now().Add(5 * time.Second); len(k.j.outcomes()) < 2 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}

	// The lock was released and the barrier rows rolled back: the redelivery runs.
	if code, body := send(bare); code != 200 {
		t.Fatalf("redelivery after the panics answered %d %s", code, body)
	}
	expectOutcomes(t, k.j, "action:500:-", "action:500:-", "action:200:proceed")
	if k.balance(t) != initBalance-30 {
		t.Fatalf("balance %d", k.balance(t))
	}
}

// TestTCCDisorder: a cancel delivered before its try (the try's request was slow) is an empty
// cancel; the try arriving afterwards hangs: neither touches the balance.
func TestTCCDisorder(t *testing.T) {
	k := setup(t, nil, nil)
	try := k.b.Handle(barrier.OpTry, dtmhttp.Gorm(k.bar, k.adjust(-1)))
	cancel := k.b.Handle(barrier.OpCancel, dtmhttp.Gorm(k.bar, k.adjust(+1)))
	gid := testsvc.Name("gid-")
	expect(t, cancel, call{"tcc", gid, "01", "cancel", `{"amount":30}`}, 200, "SUCCESS")
	expect(t, cancel, call{"tcc", gid, "01", "cancel", `{"amount":30}`}, 200, "SUCCESS")
	expect(t, try, call{"tcc", gid, "01", "try", `{"amount":30}`}, 200, "SUCCESS")
	expectOutcomes(t, k.j, "cancel:200:null-compensation", "cancel:200:duplicate", "try:200:hanging")
	if k.runCount() != 0 || k.balance(t) != initBalance {
		t.Fatalf("business ran %d times, balance %d", k.runCount(), k.balance(t))
	}
}

// TestRedisBranch: the Redis barrier variant: the business is a Lua body applied atomically with the
// barrier keys; a FAILURE reply is a permanent failure (409) and the compensation then does nothing.
func TestRedisBranch(t *testing.T) {
	k := setup(t, nil, nil)
	bar, err := barrier.NewRedis(k.rdb, nil)
	if err != nil {
		t.Fatal(err)
	}
	tag := testsvc.Name("acct-")
	testsvc.CleanRedis(t, k.rdb, "{"+tag+"}")
	acct := "{" + tag + "}:balance"
	if err := k.rdb.Set(ctxb, acct, initBalance, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	adjust := barrier.NewScript(`
local bal = tonumber(redis.call('GET', KEYS[1]) or '0')
local delta = tonumber(ARGV[1])
if bal + delta < 0 then return redis.error_reply('FAILURE: insufficient balance') end
return redis.call('INCRBY', KEYS[1], delta)`)
	step := func(sign int) dtmhttp.Business {
		return dtmhttp.Redis(bar, func(ctx context.Context, p transfer) (*barrier.RedisCall, error) {
			return &barrier.RedisCall{Script: adjust, Keys: []string{acct}, Args: []any{sign * p.Amount}}, nil
		})
	}
	action := k.b.Handle(barrier.OpAction, step(-1))
	compensate := k.b.Handle(barrier.OpCompensate, step(+1))

	gid := testsvc.Name("gid-")
	expect(t, action, call{"saga", gid, "01", "action", `{"amount":30}`}, 200, "SUCCESS")
	expect(t, action, call{"saga", gid, "01", "action", `{"amount":30}`}, 200, "SUCCESS")
	expect(t, action, call{"saga", gid, "02", "action", `{"amount":1000}`}, 409, `"dtm_result":"FAILURE"`)
	expect(t, compensate, call{"saga", gid, "02", "compensate", `{"amount":1000}`}, 200, "SUCCESS")
	expect(t, compensate, call{"saga", gid, "01", "compensate", `{"amount":30}`}, 200, "SUCCESS")
	expectOutcomes(t, k.j, "action:200:proceed", "action:200:duplicate", "action:409:proceed",
		"compensate:200:null-compensation", "compensate:200:proceed")
	if bal, err := k.rdb.Get(ctxb, acct).Int(); err != nil || bal != initBalance {
		t.Fatalf("balance %d, %v", bal, err)
	}
}

// lostReleaseLocker's first Release fails without taking effect, as on a connection Redis dropped.
type lostReleaseLocker struct {
	idemkit.Locker
	failed atomic.Bool
}

func (l *lostReleaseLocker) Release(ctx context.Context, key, token string, result []byte, ttl time.Duration) error {
	if l.failed.CompareAndSwap(false, true) {
		return errors.New("write tcp 127.0.0.1:50000->127.0.0.1:6379: connection reset by peer")
	}
	return l.Locker.Release(ctx, key, token, result, ttl)
}

// TestFailedBranchReleaseIsRetried: a branch lock whose release failed once (a Redis blip) stayed, so
// DTM's retries of the branch were answered 425 until LockTTL ran out. The release is retried in the
// background, as the Guard's.
func TestFailedBranchReleaseIsRetried(t *testing.T) {
	k := setup(t, nil, nil)
	lost := &lostReleaseLocker{Locker: k.locker}
	b, err := dtmhttp.New(&dtmhttp.Options{Locker: lost, LockTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	c := call{"saga", testsvc.Name("gid-"), "01", "action", `{"amount":30}`}
	expect(t, b.Handle(barrier.OpAction, dtmhttp.Gorm(k.bar, k.adjust(-1))), c, 200, "SUCCESS")
	if !lost.failed.Load() {
		t.Fatal("the lock was not released")
	}
	// DTM's retry, through a healthy Locker (k.b shares k.locker and the key layout).
	action := k.b.Handle(barrier.OpAction, dtmhttp.Gorm(k.bar, k.adjust(-1)))
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		rec := httptest.NewRecorder()
		action.ServeHTTP(rec, c.request())
		if rec.Code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the retry still answers %d %s 2 s later", rec.Code, rec.Body)
		}
	}
	if k.runCount() != 1 {
		t.Fatalf("business ran %d times, want 1", k.runCount())
	}
}

// TestLockWhoseReplyWasLostIsReleasedDespiteABlip: the release of a lock an Acquire took although
// its reply was lost was tried once: when it failed too (the same Redis blip), the lock stayed and
// DTM's retries of the branch were answered 425 until LockTTL ran out. It is retried as a failed
// release is.
func TestLockWhoseReplyWasLostIsReleasedDespiteABlip(t *testing.T) {
	k := setup(t, nil, nil)
	lost, err := dtmhttp.New(&dtmhttp.Options{Locker: lostReplyLocker{&lostReleaseLocker{Locker: k.locker}}, LockTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	c := call{"saga", testsvc.Name("gid-"), "01", "action", `{"amount":30}`}
	expect(t, lost.Handle(barrier.OpAction, dtmhttp.Gorm(k.bar, k.adjust(-1))), c, 500, "")
	// DTM's retry, through a healthy Locker (k.b shares k.locker and the key layout).
	action := k.b.Handle(barrier.OpAction, dtmhttp.Gorm(k.bar, k.adjust(-1)))
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		rec := httptest.NewRecorder()
		action.ServeHTTP(rec, c.request())
		if rec.Code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the retry still answers %d %s 2 s later", rec.Code, rec.Body)
		}
	}
	if k.runCount() != 1 {
		t.Fatalf("business ran %d times, want 1", k.runCount())
	}
}

// outageLocker fails every Acquire of a key holding "down" (a read timeout after the command took
// effect, so each such delivery's lock is released in the background), and every Release while down
// is set.
type outageLocker struct {
	idemkit.Locker
	down atomic.Bool
}

func (l *outageLocker) Acquire(ctx context.Context, key, token string, ttl time.Duration) ([]byte, error) {
	if strings.Contains(key, "down") {
		return nil, errors.New("read tcp 127.0.0.1:50000->127.0.0.1:6379: i/o timeout")
	}
	return l.Locker.Acquire(ctx, key, token, ttl)
}

func (l *outageLocker) Release(ctx context.Context, key, token string, result []byte, ttl time.Duration) error {
	if l.down.Load() {
		return errors.New("write tcp 127.0.0.1:50000->127.0.0.1:6379: connection reset by peer")
	}
	return l.Locker.Release(ctx, key, token, result, ttl)
}

// TestFailedBranchReleaseRetriedDuringAnOutage: the retries of failed branch releases shared their
// bound with the background releases of the locks failed Acquires may have taken, which an outage
// fills (every delivery's Acquire fails, and each release is retried for DefaultReleaseTimeout): the
// retry of a branch that ran was dropped, and DTM's retries were answered 425 until LockTTL ran out.
// Each kind has a bound of its own, as the Guard's.
func TestFailedBranchReleaseRetriedDuringAnOutage(t *testing.T) {
	k := setup(t, nil, nil)
	lk := &outageLocker{Locker: k.locker}
	lk.down.Store(true)
	b, err := dtmhttp.New(&dtmhttp.Options{Locker: lk, LockTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	action := b.Handle(barrier.OpAction, dtmhttp.Gorm(k.bar, k.adjust(-1)))
	for i := range 100 { // more than the bound
		rec := httptest.NewRecorder()
		action.ServeHTTP(rec, call{"saga", testsvc.Name("down-"), "01", "action", `{"amount":1}`}.request())
		if rec.Code != http.StatusInternalServerError {
			t.Fatalf("delivery %d with its Acquire failing answered %d %s, want 500", i, rec.Code, rec.Body)
		}
	}
	c := call{"saga", testsvc.Name("gid-"), "01", "action", `{"amount":30}`}
	expect(t, action, c, 200, "SUCCESS") // its release fails
	lk.down.Store(false)
	// DTM's retry, through a healthy Locker (k.b shares k.locker and the key layout).
	retry := k.b.Handle(barrier.OpAction, dtmhttp.Gorm(k.bar, k.adjust(-1)))
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		rec := httptest.NewRecorder()
		retry.ServeHTTP(rec, c.request())
		if rec.Code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the retry still answers %d %s 2 s later", rec.Code, rec.Body)
		}
	}
	if k.runCount() != 1 {
		t.Fatalf("business ran %d times, want 1", k.runCount())
	}
}
