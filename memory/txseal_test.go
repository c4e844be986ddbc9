package memory_test

import (
	"context"
	"testing"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/memory"
)

var _ idemkit.TxSealer = (*memory.Tx)(nil)

// TestGuardTxFunctionCannotEndTheTransaction: the transaction Guard.Tx hands its function refuses
// Commit and Rollback while the function runs, so the record is written in it and a duplicate replays.
func TestGuardTxFunctionCannotEndTheTransaction(t *testing.T) {
	ctx := context.Background()
	s := memory.NewStore()
	g, err := idemkit.New(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	runs := 0
	for i := range 2 {
		res, err := g.Tx(ctx, s, idemkit.Call{Scope: "s", Key: "k"}, func(ctx context.Context, tx idemkit.TxStore) ([]byte, error) {
			runs++
			if err := tx.Commit(); err == nil {
				t.Error("the function's tx.Commit() was not refused")
			}
			if err := tx.Rollback(); err == nil {
				t.Error("the function's tx.Rollback() was not refused")
			}
			return []byte("done"), nil
		})
		if err != nil || string(res.Value) != "done" || res.Replayed != (i == 1) {
			t.Fatalf("call %d: %+v, %v", i, res, err)
		}
	}
	if runs != 1 {
		t.Fatalf("the function ran %d times, want 1", runs)
	}
}
