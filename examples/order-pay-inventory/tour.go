package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The tour: a scripted walk through the guarantees, on real traffic, each step narrated and checked.

// Tour timings.
const (
	tourSlowBranch    = 1500 * time.Millisecond // how slow the inventory service gets in step 2
	tourClientTimeout = 500 * time.Millisecond  // how long the impatient client of step 2 waits
	tourRetryEvery    = 250 * time.Millisecond  // how often the tour's client retries an in-flight key
	tourSettleWait    = 30 * time.Second        // bound on waiting for an order to settle
	tourEventsWait    = 3 * time.Second         // bound on waiting for the last branch call of a settled order
)

// The tour's data: alice can pay, bob cannot (amounts are cents).
const (
	aliceBalance = 10000
	bobBalance   = 100
	appleStock   = 10
	pearStock    = 5
)

// tour is one run of the tour.
type tour struct {
	out    io.Writer
	svc    *Services
	c      *client
	run    string // random, so keys never repeat across runs on a kept data directory
	slow   atomic.Int64
	events branchLog

	step     int
	title    string
	failures []string
}

// runTour starts the services with cfg, walks through the tour narrating to out, stops the services
// and returns nil when every step behaved as expected, or an error naming the steps that did not.
// Each of adjust may change the services' run options (the tests break a service with it).
func runTour(ctx context.Context, cfg Config, out io.Writer, logger *slog.Logger, adjust ...func(*RunOptions)) error {
	t := &tour{out: out, run: randomHex(3)}
	fmt.Fprintln(out, "idemkit tour: an order service, a payment service and an inventory service under DTM")
	fmt.Fprintln(out)
	if cfg.DTM == "" {
		fmt.Fprintln(out, "Starting the DTM server (built on first use: a cold build takes a few minutes, then it is cached)...")
	}
	ro := RunOptions{
		Logger:        logger,
		BuildProgress: out,
		OnBranch:      t.events.add,
		Wrap:          t.slowInventory,
	}
	for _, f := range adjust {
		f(&ro)
	}
	svc, err := Start(ctx, cfg, ro)
	if err != nil {
		return fmt.Errorf("starting the services: %w", err)
	}
	defer func() {
		if err := svc.Close(); err != nil {
			fmt.Fprintf(out, "stopping the services: %v\n", err)
		}
	}()
	t.svc, t.c = svc, newClient(svc.URL)
	fmt.Fprintf(out, "  services   %s (order, payment and inventory on one listener)\n", svc.URL)
	fmt.Fprintf(out, "  database   %s\n", svc.db.where)
	fmt.Fprintf(out, "  lock/cache %s\n", svc.lockDescription())
	fmt.Fprintf(out, "  DTM        %s\n", svc.dtm.describe())
	fmt.Fprintf(out, "  an order request waits up to %s for the outcome of its global transaction\n", svc.Cfg.Wait)

	if err := t.setup(ctx); err != nil {
		return err
	}
	steps := []struct {
		title string
		run   func(context.Context) error
	}{
		{"A double click creates one order", t.doubleClick},
		{"A retry after a client timeout gets the replayed response", t.clientTimeout},
		{"An order that cannot be paid is compensated and the stock comes back", t.sagaCompensated},
		{"A TCC order with a failing branch is cancelled", t.tccCancelled},
		{"A key reused with another body gets 422", t.keyReused},
	}
	for i, s := range steps {
		t.step, t.title = i+1, s.title
		fmt.Fprintf(out, "\n%d. %s\n", t.step, s.title)
		if err := s.run(ctx); err != nil {
			t.fail(err.Error())
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}

	fmt.Fprintln(out)
	if len(t.failures) == 0 {
		fmt.Fprintf(out, "All %d steps behaved as expected.\n", len(steps))
		return nil
	}
	if log := svc.DTMLog(); log != "" {
		fmt.Fprintf(out, "The end of the DTM server's log:\n%s\n", lastLines(log, 30))
	}
	return fmt.Errorf("%d check(s) failed:\n  %s", len(t.failures), strings.Join(t.failures, "\n  "))
}

// setup gives alice and bob their balances and stocks apples and pears.
func (t *tour) setup(ctx context.Context) error {
	fmt.Fprintln(t.out, "\nSetup (PUT is idempotent by itself and needs no key)")
	for _, p := range []struct {
		path string
		body any
		what string
	}{
		{"/api/accounts/alice", map[string]int64{"balance": aliceBalance}, "alice has " + money(aliceBalance)},
		{"/api/accounts/bob", map[string]int64{"balance": bobBalance}, "bob has " + money(bobBalance)},
		{"/api/inventory/apple", map[string]int64{"stock": appleStock}, fmt.Sprintf("%d apples in stock", appleStock)},
		{"/api/inventory/pear", map[string]int64{"stock": pearStock}, fmt.Sprintf("%d pears in stock", pearStock)},
	} {
		if err := t.c.put(ctx, p.path, p.body); err != nil {
			return fmt.Errorf("setup: %w", err)
		}
		fmt.Fprintf(t.out, "   PUT %-22s %s\n", p.path, p.what)
	}
	return nil
}

// 1. Two identical requests at the same moment: one order, one charge.
func (t *tour) doubleClick(ctx context.Context) error {
	body := orderRequest{UserID: "alice", SKU: "apple", Qty: 2, Amount: 300}
	key := t.key("double-click")
	before, err := t.snapshot(ctx, "alice", "apple")
	if err != nil {
		return err
	}
	t.say("alice double-clicks \"buy 2 apples for %s\": two identical POST /api/orders with", money(body.Amount))
	t.say("Idempotency-Key %q leave at the same moment.", key)
	var wg sync.WaitGroup
	var r [2]*response
	var errs [2]error
	gate := make(chan struct{})
	for i := range r {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			r[i], errs[i] = t.c.do(ctx, http.MethodPost, "/api/orders", key, body)
		}()
	}
	close(gate)
	wg.Wait()
	if err := errors.Join(errs[:]...); err != nil {
		return err
	}
	final := r
	for i := range r {
		t.say("  click %d <- %s", i+1, r[i])
	}
	for i := range r {
		if r[i].inFlight() {
			t.say("  click %d was turned away at once while the other click ran: nothing ran twice. The app", i+1)
			t.say("  retries it with the same key:")
			if final[i], err = t.retry(ctx, fmt.Sprintf("click %d", i+1), "/api/orders", key, body); err != nil {
				return err
			}
		}
	}
	c1, err1 := final[0].created()
	c2, err2 := final[1].created()
	if err := errors.Join(err1, err2); err != nil {
		return err
	}
	t.check(c1.OrderID == c2.OrderID, "both clicks got order %s", c1.OrderID)
	t.check(final[0].replayed() != final[1].replayed(), "one answer ran the order, the other is its replay (Idempotent-Replayed: true)")
	o, err := t.c.settled(ctx, c1.OrderID, tourSettleWait)
	if err != nil {
		return err
	}
	t.check(o.Status == statusPaid, "the order is %s", o.Status)
	t.expect(ctx, before, -body.Amount, -body.Qty, 1, "alice paid once and 2 apples left the stock once")
	return nil
}

// 2. The client times out while the order is still running, then retries with the same key.
func (t *tour) clientTimeout(ctx context.Context) error {
	body := orderRequest{UserID: "alice", SKU: "pear", Qty: 1, Amount: 250}
	key := t.key("timeout")
	before, err := t.snapshot(ctx, "alice", "pear")
	if err != nil {
		return err
	}
	t.say("The inventory service turns slow (each call takes %s) and alice's app gives up after %s.",
		tourSlowBranch, tourClientTimeout)
	t.slow.Store(int64(tourSlowBranch))
	defer t.slow.Store(0)
	t.say("  POST /api/orders, Idempotency-Key %q, 1 pear for %s", key, money(body.Amount))
	tctx, cancel := context.WithTimeout(ctx, tourClientTimeout)
	r, err := t.c.do(tctx, http.MethodPost, "/api/orders", key, body)
	cancel()
	switch {
	case err != nil && errors.Is(err, context.DeadlineExceeded):
		t.say("  <- nothing: the client timed out. Did the order happen? The client cannot know, so it retries")
		t.say("     with the same key; the server carries on with the first request meanwhile.")
	case err != nil:
		return err
	default:
		t.check(false, "the client should have timed out, but got %s", r)
	}
	final, err := t.retry(ctx, "retry", "/api/orders", key, body)
	if err != nil {
		return err
	}
	t.slow.Store(0)
	c, err := final.created()
	if err != nil {
		return err
	}
	t.check(final.replayed(), "the retry got the first request's answer, replayed (order %s)", c.OrderID)
	o, err := t.c.settled(ctx, c.OrderID, tourSettleWait)
	if err != nil {
		return err
	}
	t.check(o.Status == statusPaid, "the order is %s", o.Status)
	t.expect(ctx, before, -body.Amount, -body.Qty, 1, "one order, one charge, one pear, although the client sent it twice")
	return nil
}

// 3. bob cannot pay: the saga's payment step fails and DTM compensates the inventory step.
func (t *tour) sagaCompensated(ctx context.Context) error {
	body := orderRequest{UserID: "bob", SKU: "apple", Qty: 3, Amount: 450}
	before, err := t.snapshot(ctx, "bob", "apple")
	if err != nil {
		return err
	}
	t.say("bob has %s and orders 3 apples for %s. The saga takes the apples first, then the money.",
		money(before.acct.Balance), money(body.Amount))
	c, o, err := t.order(ctx, false, "unpayable", body)
	if err != nil {
		return err
	}
	t.branchCalls(ctx, c.GID, "inventory", "restore")
	t.check(o.Status == statusFailed, "the order is %s", o.Status)
	t.check(t.events.has(c.GID, "inventory", "restore", http.StatusOK), "DTM compensated the deduction: inventory restore answered 200")
	t.expect(ctx, before, 0, 0, 1, "the 3 apples are back in stock and bob still has his money")
	return nil
}

// 4. TCC: a payable order is confirmed; one whose payment try fails is cancelled.
func (t *tour) tccCancelled(ctx context.Context) error {
	ok := orderRequest{UserID: "alice", SKU: "pear", Qty: 1, Amount: 250}
	before, err := t.snapshot(ctx, "alice", "pear")
	if err != nil {
		return err
	}
	t.say("First a TCC order that works: alice orders 1 pear for %s on POST /api/orders/tcc.", money(ok.Amount))
	t.say("The tries reserve the pear and freeze the money; DTM then confirms both.")
	c, o, err := t.order(ctx, true, "tcc-ok", ok)
	if err != nil {
		return err
	}
	t.branchCalls(ctx, c.GID, "payment", "confirm")
	t.check(o.Status == statusPaid, "the order is %s", o.Status)
	t.expect(ctx, before, -ok.Amount, -ok.Qty, 1, "alice paid, the pear is sold, nothing is left frozen or reserved")

	bad := orderRequest{UserID: "bob", SKU: "pear", Qty: 1, Amount: 250}
	if before, err = t.snapshot(ctx, "bob", "pear"); err != nil {
		return err
	}
	t.say("")
	t.say("Now bob (%s) orders 1 pear for %s the same way. The inventory try reserves the pear, the",
		money(before.acct.Balance), money(bad.Amount))
	t.say("payment try fails, the initiator aborts and DTM cancels the tried branches.")
	c, o, err = t.order(ctx, true, "tcc-fail", bad)
	if err != nil {
		return err
	}
	t.branchCalls(ctx, c.GID, "inventory", "cancel")
	t.check(o.Status == statusFailed, "the order is %s", o.Status)
	t.check(t.events.has(c.GID, "inventory", "cancel", http.StatusOK), "DTM cancelled the reservation: inventory cancel answered 200")
	t.expect(ctx, before, 0, 0, 1, "balances and stock are unchanged, nothing is left frozen or reserved")
	return nil
}

// 5. The key of step 1 sent with another body.
func (t *tour) keyReused(ctx context.Context) error {
	body := orderRequest{UserID: "alice", SKU: "apple", Qty: 5, Amount: 750}
	key := t.key("double-click")
	before, err := t.snapshot(ctx, "alice", "apple")
	if err != nil {
		return err
	}
	t.say("alice's app has a bug: it sends step 1's key %q again, for 5 apples this time.", key)
	r, err := t.c.do(ctx, http.MethodPost, "/api/orders", key, body)
	if err != nil {
		return err
	}
	t.say("  <- %s", r)
	t.check(r.Status == http.StatusUnprocessableEntity && r.problemType() == "payload-mismatch",
		"422 payload-mismatch: a key names one request; replaying step 1's answer for another body would be a lie")
	t.expect(ctx, before, 0, 0, 0, "no order was created, nothing was charged")
	return nil
}

// order sends one order request, prints the answer and the order once it settled.
func (t *tour) order(ctx context.Context, tcc bool, name string, body orderRequest) (created, order, error) {
	key := t.key(name)
	path := orderPath(tcc)
	t.say("  POST %s, Idempotency-Key %q", path, key)
	r, err := t.c.do(ctx, http.MethodPost, path, key, body)
	if err != nil {
		return created{}, order{}, err
	}
	t.say("  <- %s", r)
	c, err := r.created()
	if err != nil {
		return c, order{}, err
	}
	o, err := t.c.settled(ctx, c.OrderID, tourSettleWait)
	if err == nil && c.Status == statusPending {
		t.say("     the outcome was not known within the request's wait; the reconciler settled it: %s", o.Status)
	}
	return c, o, err
}

// retry sends the request again every tourRetryEvery while the key is in flight and returns the first
// other answer. It prints the first in-flight answer and the final one.
func (t *tour) retry(ctx context.Context, who, path, key string, body any) (*response, error) {
	deadline := time.Now().Add(tourSettleWait)
	for n := 1; ; n++ {
		r, err := t.c.do(ctx, http.MethodPost, path, key, body)
		if err != nil {
			return nil, err
		}
		done := !r.inFlight() || time.Now().After(deadline)
		switch {
		case done && n > 2:
			t.say("  %s ... %d more in-flight answers, %s apart", who, n-2, tourRetryEvery)
			fallthrough
		case done || n == 1:
			t.say("  %s <- %s", who, r)
		}
		if done {
			return r, nil
		}
		if n == 1 {
			t.say("           in flight: the first request still runs. Retry-After is a short hint (at most")
			t.say("           httpx.Options.InFlightRetryAfter, 1 s); this client polls every %s.", tourRetryEvery)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(tourRetryEvery):
		}
	}
}

// branchCalls waits (bounded) until the branch call service/business of gid was answered, then prints
// the branch calls of gid in the order they were answered.
func (t *tour) branchCalls(ctx context.Context, gid, service, business string) {
	deadline := time.Now().Add(tourEventsWait)
	for !t.events.has(gid, service, business, 0) && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
	}
	t.say("     branch calls of %s:", gid)
	for _, e := range t.events.of(gid) {
		caller := "DTM"
		if e.Op == "try" {
			caller = "order service"
		}
		line := fmt.Sprintf("       %-13s -> %-9s %-8s %-18s %d", caller, e.Service, e.Business, "("+e.TransType+" "+e.Op+")", e.Status)
		switch {
		case e.Err != nil:
			line += ": " + e.Err.Error()
		case e.Outcome != 0:
			line += ", barrier: " + e.Outcome.String()
			if e.Outcome.String() == "null-compensation" {
				line += " (its action never happened: nothing to undo)"
			}
		}
		t.say("%s", line)
	}
}

// state is what a step changes: one account, one SKU and the account's order count.
type state struct {
	user, sku string
	acct      account
	item      item
	orders    int64
}

func (t *tour) snapshot(ctx context.Context, user, sku string) (state, error) {
	s := state{user: user, sku: sku}
	var err error
	if s.acct, err = t.c.account(ctx, user); err != nil {
		return s, err
	}
	if s.item, err = t.c.item(ctx, sku); err != nil {
		return s, err
	}
	err = t.svc.db.db.WithContext(ctx).Raw("SELECT COUNT(*) FROM "+t.svc.db.tables.orders+" WHERE user_id = ?", user).Row().Scan(&s.orders)
	return s, err
}

// expect checks the balance, stock and order count against before plus the deltas, and that nothing is
// left frozen or reserved.
func (t *tour) expect(ctx context.Context, before state, dBalance, dStock, dOrders int64, what string) {
	after, err := t.snapshot(ctx, before.user, before.sku)
	if err != nil {
		t.check(false, "reading balances: %v", err)
		return
	}
	ok := after.acct.Balance == before.acct.Balance+dBalance && after.acct.Frozen == before.acct.Frozen &&
		after.item.Stock == before.item.Stock+dStock && after.item.Reserved == before.item.Reserved &&
		after.orders == before.orders+dOrders
	msg := fmt.Sprintf("%s: %s balance %s -> %s (frozen %s), %s stock %d -> %d (reserved %d), %s's orders %d -> %d",
		what, before.user, money(before.acct.Balance), money(after.acct.Balance), money(after.acct.Frozen),
		before.sku, before.item.Stock, after.item.Stock, after.item.Reserved, before.user, before.orders, after.orders)
	if !ok {
		msg += fmt.Sprintf("; expected balance %s (frozen %s), stock %d (reserved %d), %d orders",
			money(before.acct.Balance+dBalance), money(before.acct.Frozen), before.item.Stock+dStock,
			before.item.Reserved, before.orders+dOrders)
	}
	t.check(ok, "%s", msg)
}

// check prints a passed or failed expectation.
func (t *tour) check(ok bool, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if !ok {
		t.fail(msg)
		return
	}
	fmt.Fprintf(t.out, "   ✓ %s\n", msg)
}

// fail prints and records a failure of the current step.
func (t *tour) fail(msg string) {
	fmt.Fprintf(t.out, "   ✗ %s\n", msg)
	t.failures = append(t.failures, fmt.Sprintf("step %d (%s): %s", t.step, t.title, msg))
}

// say prints a line of narration ("" for an empty line).
func (t *tour) say(format string, args ...any) {
	if format == "" {
		fmt.Fprintln(t.out)
		return
	}
	fmt.Fprintf(t.out, "   %s\n", fmt.Sprintf(format, args...))
}

// key returns this run's idempotency key for name.
func (t *tour) key(name string) string { return "tour-" + t.run + "-" + name }

// slowInventory delays the inventory service's branch calls while t.slow is set.
func (t *tour) slowInventory(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if d := time.Duration(t.slow.Load()); d > 0 && strings.HasPrefix(r.URL.Path, "/branch/inventory/") {
			select {
			case <-time.After(d):
			case <-r.Context().Done():
			}
		}
		next.ServeHTTP(w, r)
	})
}

// branchLog collects branch calls by gid. It is safe for concurrent use.
type branchLog struct {
	mu  sync.Mutex
	gid map[string][]BranchEvent
}

func (l *branchLog) add(e BranchEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.gid == nil {
		l.gid = make(map[string][]BranchEvent)
	}
	l.gid[e.GID] = append(l.gid[e.GID], e)
}

func (l *branchLog) of(gid string) []BranchEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]BranchEvent(nil), l.gid[gid]...)
}

// has reports whether gid has a call of service/business answered with status (0: any).
func (l *branchLog) has(gid, service, business string, status int) bool {
	for _, e := range l.of(gid) {
		if e.Service == service && e.Business == business && (status == 0 || e.Status == status) {
			return true
		}
	}
	return false
}

// money formats cents.
func money(cents int64) string { return fmt.Sprintf("%d.%02d", cents/100, cents%100) }

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
