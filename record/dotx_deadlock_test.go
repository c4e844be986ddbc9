package record

import (
	"context"
	"errors"
	"testing"

	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testsvc"
)

// TestDoTxPermanentDeadlockLeavesNoRecord: on MySQL/MariaDB a deadlock rolls the victim's whole
// transaction back and leaves its connection outside any transaction. A DoTx function whose business
// statement was that victim and returned the error as permanent (marked so, or under an
// Options.IsPermanent that calls unknown errors permanent) had its REJECTED record written on that
// connection, where it committed on its own: the caller rolled back as the contract says, and every
// retry was answered the stored "Deadlock found" rejection, its business never run. A write conflict
// ends the caller's transaction: nothing is written after it, the function's error is the answer, and
// a retry runs.
func TestDoTxPermanentDeadlockLeavesNoRecord(t *testing.T) {
	f := newTxFixture(t, backends[0], nil)
	rows := testsvc.Name("t_rows_")
	testsvc.DropTable(t, f.db, rows)
	must(t, f.db.Exec("CREATE TABLE "+rows+" (id INT PRIMARY KEY, n INT)").Error)
	must(t, f.db.Exec("INSERT INTO "+rows+" VALUES (1, 0), (2, 0)").Error)
	call := idemkit.Call{Scope: "tx", Key: "deadlocked"}

	// The other transaction locks row 2, then waits for row 1, which the function holds: InnoDB
	// picks the function's transaction, the one with fewer changes, as the victim.
	twoLocked, oneLocked := make(chan struct{}), make(chan struct{})
	other := make(chan error, 1)
	go func() {
		other <- f.db.Transaction(func(tx *gorm.DB) error {
			for i := range 50 {
				if err := tx.Exec("INSERT INTO "+f.biz+" (k, fence) VALUES ('weight', ?)", i).Error; err != nil {
					return err
				}
			}
			if err := tx.Exec("UPDATE " + rows + " SET n = n + 1 WHERE id = 2").Error; err != nil {
				return err
			}
			close(twoLocked)
			<-oneLocked
			return tx.Exec("UPDATE " + rows + " SET n = n + 1 WHERE id = 1").Error
		})
	}()
	<-twoLocked
	var ferr error
	err := f.db.Transaction(func(tx *gorm.DB) error {
		_, err := f.guard.DoTx(ctxb, f.store.WithTx(tx), call, func(ctx context.Context) ([]byte, error) {
			if err := tx.Exec("UPDATE " + rows + " SET n = n + 1 WHERE id = 1").Error; err != nil {
				return nil, err
			}
			close(oneLocked)
			if ferr = tx.Exec("UPDATE " + rows + " SET n = n + 1 WHERE id = 2").Error; ferr != nil {
				return nil, idemkit.Permanent(ferr)
			}
			return nil, errors.New("the statement did not deadlock")
		})
		return err
	})
	if oerr := <-other; oerr != nil {
		t.Fatalf("the other transaction: %v", oerr)
	}
	if !IsConflict(ferr) || !errors.Is(err, ferr) {
		t.Fatalf("DoTx: %v (the function's statement: %v); want the function's deadlock", err, ferr)
	}
	if rec, gerr := f.store.Get(ctxb, call.Scope, call.Key); !errors.Is(gerr, idemkit.ErrNotFound) {
		t.Fatalf("record after the caller's rollback: %+v, %v; want none", rec, gerr)
	}
	res, err := f.guard.Do(ctxb, call, func(context.Context) ([]byte, error) { return []byte("ran"), nil })
	if err != nil || res.Replayed || string(res.Value) != "ran" {
		t.Fatalf("retry: %+v, %v; want the function to run", res, err)
	}
}
