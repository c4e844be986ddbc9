package hooks_test

import (
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/idemtest"
	"github.com/idemkit/idemkit/memory"
)

// TestSettleFencedAfterRefusal: the Store refuses the outcome's values and the record was
// settled by another meanwhile, so the replacement write is fenced. Guard.Settle returns
// errors.Join(refused, ErrFenced); Lifecycle's settle swallows anything matching ErrUnstorable
// that is not ErrStoreUnavailable, so Rollback reports success for an outcome that was not written.
func TestSettleFencedAfterRefusal(t *testing.T) {
	clock := idemtest.NewClock()
	ms := memory.NewStore()
	g, err := idemkit.New(refusingUpdates{ms}, &idemkit.Options{Lease: time.Second, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	lc := &hooks.Lifecycle{Guard: g}
	txn, _, err := lc.Begin(ctxb, "saga", "g1", call("k"))
	if err != nil {
		t.Fatal(err)
	}
	lc.Detach(ctxb, txn)
	stale, err := g.Get(ctxb, "create-order", "k")
	if err != nil {
		t.Fatal(err)
	}
	// Someone else (the initiator) settles the record first.
	if err := g.Settle(ctxb, stale, []byte("ok"), nil); err != nil {
		t.Fatal(err)
	}
	// A Reconciler working from the stale copy rolls back with a reason the Store refuses.
	tx := &hooks.Txn{TransType: "saga", GID: "g1", Record: *stale}
	err = lc.Rollback(ctxb, tx, errors.New("a step failed with a long message"))
	if !errors.Is(err, idemkit.ErrFenced) {
		t.Fatalf("Rollback = %v; want ErrFenced (the record was SUCCEEDED by another, nothing written)", err)
	}
}
