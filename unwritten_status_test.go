package idemkit_test

import (
	"context"
	"errors"
	"testing"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/memory"
)

// insertFailing is a memory Store whose record inserts fail, as a database gone down would.
type insertFailing struct{ *memory.Store }

func (insertFailing) Insert(context.Context, *idemkit.Record) error {
	return errors.New("connection refused")
}

// TestEventStatusWhenTxOutcomeNotRecorded: as in Execute mode (README: "a call whose outcome the
// Store failed to write keeps the record's status, not the unwritten one"), a DoTx or Tx call whose
// permanent failure could not be recorded REJECTED reports no status: no record was written.
func TestEventStatusWhenTxOutcomeNotRecorded(t *testing.T) {
	obs := &eventRecorder{}
	st := insertFailing{memory.NewStore()}
	g, err := idemkit.New(st, &idemkit.Options{Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	declined := idemkit.Permanent(errors.New("declined"))
	_, err = g.DoTx(ctxb, st, idemkit.Call{Scope: "s", Key: "dotx"}, func(context.Context) ([]byte, error) { return nil, declined })
	if !errors.Is(err, idemkit.ErrStoreUnavailable) {
		t.Fatalf("DoTx: %v", err)
	}
	_, err = g.Tx(ctxb, st, idemkit.Call{Scope: "s", Key: "tx"}, func(context.Context, idemkit.TxStore) ([]byte, error) { return nil, declined })
	if !errors.Is(err, idemkit.ErrStoreUnavailable) {
		t.Fatalf("Tx: %v", err)
	}
	for _, k := range []string{"dotx", "tx"} {
		if _, err := st.Get(ctxb, "s", k); !errors.Is(err, idemkit.ErrNotFound) {
			t.Fatalf("%s: record %v, want none", k, err)
		}
	}
	for _, ev := range obs.events {
		if ev.Status != "" {
			t.Errorf("%s call whose REJECTED record was not written: event status %q, want none", ev.Mode, ev.Status)
		}
	}
}
