package hooks_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/memory"
)

// hangingStore never answers a finish: a database that stopped answering (no TCP reset).
type hangingStore struct{ *memory.Store }

func (h hangingStore) Update(ctx context.Context, rec *idemkit.Record, prev idemkit.Version) error {
	if rec.Status != idemkit.StatusProcessing {
		<-ctx.Done()
		return ctx.Err()
	}
	return h.Store.Update(ctx, rec, prev)
}

// TestSettleAfterWaitIsBounded: the settlement after the wait survives the caller's
// cancellation, but must stay bounded (Options.FinishTimeout, as Claim.Finish promises): a Store that
// hangs must not hang Run forever, and Run says the record was not settled.
func TestSettleAfterWaitIsBounded(t *testing.T) {
	g, err := idemkit.New(hangingStore{memory.NewStore()}, &idemkit.Options{FinishTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	lc := &hooks.Lifecycle{Guard: g}
	status := dtmAnswering(t, `{"branches":[{"op":"action"}],"transaction":{"status":"succeed","trans_type":"saga"}}`)
	ctx, cancel := context.WithTimeout(ctxb, time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := lc.Run(ctx, hooks.RunParams{TransType: "saga", Call: call("k"), Status: status, GID: "g1", Wait: time.Second,
			Start: func(context.Context, string) error { return nil }})
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Run returned nil, though the record could not be settled (the finish ran out of time)")
		}
		t.Logf("Run returned %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("Run still blocked 5 s after its context's 1 s deadline with FinishTimeout 200 ms: the settlement is unbounded")
	}
}
