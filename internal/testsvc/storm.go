package testsvc

import (
	"context"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/internal/dtmserver"
)

// SlowGateway returns a proxy in front of srv that holds every POST for up to max, a random time
// each: a slow network or gateway between initiators and DTM.
func SlowGateway(t testing.TB, srv *dtmserver.Server, max time.Duration) *dtmserver.Proxy {
	t.Helper()
	return dtmserver.NewProxy(t, srv, func(r *http.Request) dtmserver.ProxyAction {
		if r.Method != http.MethodPost {
			return dtmserver.ProxyAction{}
		}
		hold := make(chan struct{})
		time.AfterFunc(time.Duration(rand.Int64N(int64(max))), func() { close(hold) })
		return dtmserver.ProxyAction{Hold: hold}
	})
}

// DuplicateStorm calls run(i) for each of n keys 3 times at once, in 3 rounds 300 ms apart, while
// reconcile runs every 30 ms; once every call returned, it runs reconcile until pending(i) is false
// for every key, and fails t when a key is still pending after settle.
func DuplicateStorm(t testing.TB, n int, run func(i int), reconcile func(), pending func(i int) bool, settle time.Duration) {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	var rwg sync.WaitGroup
	rwg.Go(func() {
		for ctx.Err() == nil {
			reconcile()
			time.Sleep(30 * time.Millisecond)
		}
	})
	var wg sync.WaitGroup
	for range 3 {
		for i := range n {
			for range 3 {
				wg.Go(func() { run(i) })
			}
		}
		time.Sleep(300 * time.Millisecond)
	}
	wg.Wait()
	stop()
	rwg.Wait()
	for deadline := time.Now().Add(settle); ; time.Sleep(200 * time.Millisecond) {
		reconcile()
		left := 0
		for i := range n {
			if pending(i) {
				left++
			}
		}
		if left == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d keys still pending %s after the storm", left, settle)
		}
	}
}

// ReconcileLate runs rc once with a clock an hour ahead — every claim's lease has run out — and
// returns how many records it settled and the events it observed (rc.Observe is replaced).
func ReconcileLate(t testing.TB, rc *hooks.Reconciler) (int, []hooks.ReconcileEvent) {
	t.Helper()
	var mu sync.Mutex
	var events []hooks.ReconcileEvent
	rc.Observe = func(_ context.Context, e *hooks.ReconcileEvent) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, *e)
	}
	n, err := rc.RunOnce(context.Background(), time.Now().Add(time.Hour), 100)
	if err != nil {
		t.Fatalf("reconciler: %v", err)
	}
	return n, events
}
