package hooks_test

import (
	"context"
	"testing"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/hooks"
)

// TestHooksCannotRedirectTheTransaction: every hook is given the Txn, whose fields are exported. A
// Before hook that changed its GID (or its Record) changed the transaction the Lifecycle followed:
// the later hooks ran for the other gid — writing to that transaction's rows — and the record was
// compared with it. A hook now gets a copy: what it changes stays in that copy.
func TestHooksCannotRedirectTheTransaction(t *testing.T) {
	b := setup(t)
	l := *b.lc
	var seen []string
	l.Before = hooks.BeforeTransactionFunc(func(_ context.Context, tx *hooks.Txn) error {
		seen = append(seen, "before:"+tx.GID)
		tx.GID, tx.TransType, tx.Record.Fence = "another-gid", "tcc", 999
		return nil
	})
	l.OnCommit = hooks.CommitFunc(func(_ context.Context, tx *hooks.Txn, _ []byte) error {
		seen = append(seen, "commit:"+tx.GID+":"+tx.TransType)
		tx.GID = "yet-another"
		return nil
	})
	txn, _, err := l.Begin(ctxb, "saga", "gid-own", call("k"))
	if err != nil {
		t.Fatal(err)
	}
	if txn.GID != "gid-own" || txn.TransType != "saga" || txn.Record.Fence == 999 {
		t.Fatalf("after the Before hook the Txn is %q %q fence %d, want gid-own saga and the claim's fence", txn.GID, txn.TransType, txn.Record.Fence)
	}
	if err := l.Commit(ctxb, txn, []byte("R")); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	if len(seen) != 2 || seen[0] != "before:gid-own" || seen[1] != "commit:gid-own:saga" {
		t.Fatalf("hooks saw %v, want before:gid-own then commit:gid-own:saga", seen)
	}
	if rec := b.status(t, "k"); rec.Status != idemkit.StatusSucceeded || rec.GID != "gid-own" {
		t.Fatalf("record %s gid %q, want SUCCEEDED under gid-own", rec.Status, rec.GID)
	}
}
