package main

// The end-to-end checks of the issue ("What must be shown" 2 and 3), once on MariaDB + Redis + a DTM
// server, once on the embedded defaults (SQLite + in-process lock + the DTM child process the services
// start themselves): 200 orders from 20 concurrent clients, each order's request sent 3 times at once
// with the same key, payable and unpayable ones, on the saga and the TCC endpoints. Once DTM settled
// everything:
//
//   - exactly one order per key, and every answer to a key names it;
//   - for every user: initial balance = balance + frozen + sum(amount of PAID orders);
//   - for every SKU:  initial stock   = stock + reserved + sum(qty of PAID orders);
//   - no order PENDING, nothing left frozen or reserved, no record left PROCESSING.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestLoadMariaDBRedis(t *testing.T) {
	t.Parallel()
	cfg := mariaDBConfig(t)
	runLoad(t, startServices(t, cfg), defaultLoad)
}

func TestLoadEmbedded(t *testing.T) {
	t.Parallel()
	needDTM(t)
	cfg := testConfig()
	cfg.DataDir = t.TempDir()
	runLoad(t, startServices(t, cfg), defaultLoad)
}

// TestLoadReconciled gives the order requests no time to learn the outcome (a 1ms wait): they answer
// PENDING and the reconciler, run by the sweeper, settles every order by asking DTM, through the same
// hooks. The checks are those of the other load tests.
func TestLoadReconciled(t *testing.T) {
	t.Parallel()
	needDTM(t)
	cfg := testConfig()
	cfg.DataDir = t.TempDir()
	cfg.Wait, cfg.ReconcileAfter = time.Millisecond, 2*time.Second
	pending := runLoad(t, startServices(t, cfg), loadSpec{orders: 40, clients: 10, dup: 3})
	if pending == 0 {
		t.Errorf("no order request answered PENDING: the reconciler had nothing to do")
	}
}

// loadSpec sizes a load run.
type loadSpec struct {
	orders  int // distinct keys
	clients int // concurrent clients
	dup     int // concurrent requests per key
}

var defaultLoad = loadSpec{orders: 200, clients: 20, dup: 3}

// The load's world: rich users always pay, poor ones run out, broke ones never pay; plenty SKUs never
// run out, scarce ones do.
var (
	loadUsers = map[string]int64{
		"rich0": 1_000_000, "rich1": 1_000_000, "rich2": 1_000_000, "rich3": 1_000_000, "rich4": 1_000_000,
		"poor0": 1_000, "poor1": 1_000, "poor2": 1_000, "poor3": 600,
		"broke": 0,
	}
	loadSKUs = map[string]int64{"plenty0": 100_000, "plenty1": 100_000, "plenty2": 100_000, "scarce0": 12, "scarce1": 2}
)

// sent is one key's requests and what the client saw.
type sent struct {
	key     string
	tcc     bool
	body    orderRequest
	answers []*response
}

// loadStats counts what the clients saw.
type loadStats struct {
	fresh, replayed, inFlight, unavailable atomic.Int64
}

// runLoad sends the load, waits until everything settled, checks it and returns how many orders were
// answered PENDING.
func runLoad(t *testing.T, svc *Services, spec loadSpec) (pending int) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := newClient(svc.URL)
	c.http.Transport = &http.Transport{MaxIdleConnsPerHost: spec.clients * spec.dup}
	for user, balance := range loadUsers {
		if err := c.put(ctx, "/api/accounts/"+user, map[string]int64{"balance": balance}); err != nil {
			t.Fatal(err)
		}
	}
	for sku, stock := range loadSKUs {
		if err := c.put(ctx, "/api/inventory/"+sku, map[string]int64{"stock": stock}); err != nil {
			t.Fatal(err)
		}
	}

	// The orders, fixed by a seed so a failure can be replayed.
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	users, skus := keys(loadUsers), keys(loadSKUs)
	work := make([]*sent, spec.orders)
	for i := range work {
		work[i] = &sent{
			key: fmt.Sprintf("load-%s-%d", randomHex(4), i),
			tcc: i%2 == 1,
			body: orderRequest{
				UserID: users[rng.IntN(len(users))], SKU: skus[rng.IntN(len(skus))],
				Qty: 1 + rng.Int64N(3), Amount: 100 + rng.Int64N(401),
			},
		}
	}
	// Every path is sure to be exercised, whatever the draw: the first saga and TCC pay (a rich user,
	// a plenty SKU), the next two fail (the broke user never pays).
	for i, user := range []string{"rich0", "rich0", "broke", "broke"} {
		if i < len(work) {
			work[i].body.UserID, work[i].body.SKU = user, "plenty0"
		}
	}

	start := time.Now()
	var stats loadStats
	queue := make(chan *sent)
	var wg sync.WaitGroup
	for range spec.clients {
		wg.Go(func() {
			for s := range queue {
				s.answers = make([]*response, spec.dup)
				var dups sync.WaitGroup
				for j := range spec.dup {
					dups.Go(func() { s.answers[j] = submit(ctx, t, c, s, &stats) })
				}
				dups.Wait()
			}
		})
	}
	for _, s := range work {
		queue <- s
	}
	close(queue)
	wg.Wait()
	t.Logf("%d keys x %d requests from %d clients in %s: %d ran, %d replayed, %d in-flight and %d unavailable answers retried",
		spec.orders, spec.dup, spec.clients, time.Since(start).Round(time.Millisecond),
		stats.fresh.Load(), stats.replayed.Load(), stats.inFlight.Load(), stats.unavailable.Load())
	if t.Failed() {
		return 0
	}

	// Every answer to a key names the same order.
	byID := make(map[string]*sent, len(work))
	answered := make(map[string]string, len(work)) // order id → status in the first 201
	for _, s := range work {
		var id string
		for j, r := range s.answers {
			cr, err := r.created()
			if err != nil {
				t.Errorf("key %s, request %d: %v", s.key, j, err)
				continue
			}
			if id == "" {
				id, answered[cr.OrderID] = cr.OrderID, cr.Status
			} else if cr.OrderID != id {
				t.Errorf("key %s: answers name orders %s and %s", s.key, id, cr.OrderID)
			}
		}
		if prev, dup := byID[id]; dup {
			t.Errorf("keys %s and %s got the same order %s", prev.key, s.key, id)
		}
		byID[id] = s
		if answered[id] == statusPending {
			pending++
		}
	}
	t.Logf("%d orders answered PENDING, settled later by the reconciler", pending)
	if t.Failed() {
		return pending
	}

	settle(ctx, t, svc)
	db, tb := svc.db.db.WithContext(ctx), svc.db.tables

	// Exactly one order per key: as many orders as keys, each the one its key's answers name.
	rows, err := db.Raw("SELECT id, user_id, sku, qty, amount, status FROM " + tb.orders).Rows()
	if err != nil {
		t.Fatal(err)
	}
	paidAmount := map[string]int64{}
	paidQty := map[string]int64{}
	count := map[string]int{}
	n := 0
	for rows.Next() {
		var o order
		if err := rows.Scan(&o.OrderID, &o.UserID, &o.SKU, &o.Qty, &o.Amount, &o.Status); err != nil {
			t.Fatal(err)
		}
		n++
		s, ok := byID[o.OrderID]
		if !ok {
			t.Errorf("order %s (%+v) belongs to no key", o.OrderID, o)
			continue
		}
		if want := (orderRequest{UserID: o.UserID, SKU: o.SKU, Qty: o.Qty, Amount: o.Amount}); s.body != want {
			t.Errorf("order %s is %+v, its key %s asked for %+v", o.OrderID, o, s.key, s.body)
		}
		kind := "saga"
		if s.tcc {
			kind = "tcc"
		}
		if a := answered[o.OrderID]; a != statusPending && a != o.Status {
			t.Errorf("order %s: the client was told %s, the order is %s", o.OrderID, a, o.Status)
		}
		count[kind+" "+o.Status]++
		switch o.Status {
		case statusPaid:
			paidAmount[o.UserID] += o.Amount
			paidQty[o.SKU] += o.Qty
		case statusFailed:
		default:
			t.Errorf("order %s is %s after DTM settled", o.OrderID, o.Status)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	_ = rows.Close()
	if n != len(work) {
		t.Errorf("%d orders for %d keys", n, len(work))
	}
	t.Logf("orders: %v", count)
	for _, k := range []string{"saga PAID", "saga FAILED", "tcc PAID", "tcc FAILED"} {
		if count[k] == 0 {
			t.Errorf("no %s order: the load did not exercise that path (%v)", k, count)
		}
	}

	// Money and stock are conserved, and nothing is left held.
	for user, initial := range loadUsers {
		a, err := c.account(ctx, user)
		if err != nil {
			t.Fatal(err)
		}
		if got := a.Balance + a.Frozen + paidAmount[user]; got != initial || a.Frozen != 0 {
			t.Errorf("%s: balance %d + frozen %d + paid %d = %d, want %d with nothing frozen",
				user, a.Balance, a.Frozen, paidAmount[user], got, initial)
		}
	}
	for sku, initial := range loadSKUs {
		it, err := c.item(ctx, sku)
		if err != nil {
			t.Fatal(err)
		}
		if got := it.Stock + it.Reserved + paidQty[sku]; got != initial || it.Reserved != 0 {
			t.Errorf("%s: stock %d + reserved %d + sold %d = %d, want %d with nothing reserved",
				sku, it.Stock, it.Reserved, paidQty[sku], got, initial)
		}
	}
	return pending
}

// retryEvery is how often a load client asks again about a key in flight.
const retryEvery = 250 * time.Millisecond

// submit sends s's request until it gets an answer that is not "in flight" or "unavailable", as a
// client retrying with the same key would, and returns it.
func submit(ctx context.Context, t *testing.T, c *client, s *sent, stats *loadStats) *response {
	for {
		r, err := c.do(ctx, http.MethodPost, orderPath(s.tcc), s.key, s.body)
		switch {
		case err != nil:
			t.Errorf("key %s: %v", s.key, err)
			return &response{}
		case r.Status == http.StatusServiceUnavailable:
			stats.unavailable.Add(1)
		case r.inFlight():
			stats.inFlight.Add(1)
		case r.replayed():
			stats.replayed.Add(1)
			return r
		default:
			stats.fresh.Add(1)
			return r
		}
		select {
		case <-ctx.Done():
			t.Errorf("key %s: %v", s.key, ctx.Err())
			return &response{}
		case <-time.After(retryEvery):
		}
	}
}

// settle waits (bounded) until no order is PENDING and no record PROCESSING: the initiators' waits
// ran out for some, the reconciler settles those once DTM finished them.
func settle(ctx context.Context, t *testing.T, svc *Services) {
	t.Helper()
	db, tb := svc.db.db.WithContext(ctx), svc.db.tables
	start := time.Now()
	deadline := start.Add(2 * time.Minute)
	for {
		var pending, processing int64
		if err := db.Raw("SELECT COUNT(*) FROM "+tb.orders+" WHERE status = ?", statusPending).Row().Scan(&pending); err != nil {
			t.Fatal(err)
		}
		if err := db.Raw("SELECT COUNT(*) FROM "+tb.records+" WHERE status = ?", "PROCESSING").Row().Scan(&processing); err != nil {
			t.Fatal(err)
		}
		if pending == 0 && processing == 0 {
			t.Logf("settled %s after the last answer", time.Since(start).Round(time.Millisecond))
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d orders PENDING and %d records PROCESSING %s after the last answer", pending, processing, time.Since(start).Round(time.Second))
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// keys returns m's keys in a fixed order.
func keys(m map[string]int64) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
