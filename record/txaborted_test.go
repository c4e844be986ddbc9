package record

import (
	"context"
	"strings"
	"testing"

	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
)

// TestTxAbortedByAnIgnoredStatementSaysSo: on PostgreSQL a statement that fails aborts the
// transaction; a function that ignores that statement's error and returns nil leaves the record's
// INSERT to fail with 25P02 (in_failed_sql_transaction). The call answered "record store
// unavailable", sending the operator to look at a database that is fine (and a message consumer
// retrying forever); the error now names the cause (found by a defect hunt).
func TestTxAbortedByAnIgnoredStatementSaysSo(t *testing.T) {
	for _, b := range backends {
		if b.name != "PostgreSQL" {
			continue
		}
		t.Run(b.name, func(t *testing.T) {
			f := newTxFixture(t, b, nil)
			_, err := f.store.Tx(ctxb, f.guard, idemkit.Call{Scope: "aborted", Key: "k1"}, func(ctx context.Context, tx *gorm.DB) ([]byte, error) {
				_ = tx.Exec("SELECT 1/0").Error // ignored: the bug
				return []byte("ok"), nil
			})
			if err == nil {
				t.Fatal("the call succeeded")
			}
			if !strings.Contains(err.Error(), "an earlier statement in it failed") {
				t.Fatalf("error %q does not say an earlier statement of the transaction failed", err)
			}
			if _, err := f.guard.Get(ctxb, "aborted", "k1"); err == nil {
				t.Fatal("a record was written")
			}
		})
	}
}
