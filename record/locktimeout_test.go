package record

import (
	"context"
	"errors"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testsvc"
)

// TestLockTimeoutOnAHeldKeyIsInFlight: a duplicate whose record write waits for another attempt's
// transaction holding the key (a mark or a record written, not yet committed) longer than the lock
// wait timeout the user's DSN or role sets (PostgreSQL lock_timeout, InnoDB innodb_lock_wait_timeout)
// is in flight, as it is when it meets the committed claim: not "record store unavailable", which
// sends an operator to a database that is fine and a client to an outage. Nothing of it commits, and
// once the holder committed a retry gets its answer.
func TestLockTimeoutOnAHeldKeyIsInFlight(t *testing.T) {
	for _, b := range []struct {
		name string
		db   func(t *testing.T) *gorm.DB
	}{
		{"MariaDB", func(t *testing.T) *gorm.DB { return testsvc.MySQLWith(t, nil, "&innodb_lock_wait_timeout=1") }},
		{"PostgreSQL", func(t *testing.T) *gorm.DB { return testsvc.PostgresWith(t, nil, " lock_timeout=200") }},
	} {
		t.Run(b.name, func(t *testing.T) {
			f := newTxFixtureOn(t, b.db(t))
			for _, mode := range []string{"TxMark", "MarkTx", "Tx", "DoTx"} {
				t.Run(mode, func(t *testing.T) { testLockTimeoutInFlight(t, f, mode) })
			}
		})
	}
}

func testLockTimeoutInFlight(t *testing.T, f *txFixture, mode string) {
	key := testsvc.Name("held-")
	call := idemkit.Call{Scope: "tx", Key: key}
	marks := mode == "TxMark" || mode == "MarkTx"
	write := func(tx *gorm.DB) error { return tx.Exec("INSERT INTO "+f.biz+" (k, fence) VALUES (?, 1)", key).Error }

	// The holder: its record (a mark, or a Tx-mode record) written in a transaction it keeps open
	// past the duplicate's lock wait timeout.
	written, release := make(chan struct{}), make(chan struct{})
	held := make(chan error, 1)
	go func() {
		held <- f.db.Transaction(func(tx *gorm.DB) error {
			var err error
			if marks {
				err = f.guard.MarkTx(ctxb, f.store.WithTx(tx), call, func(context.Context) error { return write(tx) })
			} else {
				_, err = f.guard.DoTx(ctxb, f.store.WithTx(tx), call, func(context.Context) ([]byte, error) { return []byte("first"), write(tx) })
			}
			close(written)
			if err == nil {
				<-release
			}
			return err
		})
	}()
	<-written

	dup := func() (idemkit.Result, error) {
		ctx, cancel := context.WithTimeout(ctxb, 30*time.Second)
		defer cancel()
		switch mode {
		case "TxMark":
			return idemkit.Result{}, f.store.TxMark(ctx, f.guard, call, func(ctx context.Context, tx *gorm.DB) error { return write(tx) })
		case "MarkTx":
			return idemkit.Result{}, f.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
				return f.guard.MarkTx(ctx, f.store.WithTx(tx), call, func(context.Context) error { return write(tx) })
			})
		case "Tx":
			return f.store.Tx(ctx, f.guard, call, func(ctx context.Context, tx *gorm.DB) ([]byte, error) { return []byte("second"), write(tx) })
		}
		var res idemkit.Result
		err := f.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			var err error
			res, err = f.guard.DoTx(ctx, f.store.WithTx(tx), call, func(context.Context) ([]byte, error) { return []byte("second"), write(tx) })
			return err
		})
		return res, err
	}
	_, err := dup()
	close(release)
	if herr := <-held; herr != nil {
		t.Fatalf("holder: %v", herr)
	}
	if !errors.Is(err, idemkit.ErrInFlight) || errors.Is(err, idemkit.ErrStoreUnavailable) {
		t.Fatalf("duplicate while the key's record waits for its commit past the lock wait timeout: %v; want in flight", err)
	}
	res, err := dup()
	switch {
	case marks && !errors.Is(err, idemkit.ErrDuplicate):
		t.Fatalf("retry after the holder committed: %v; want ErrDuplicate", err)
	case !marks && (err != nil || !res.Replayed || string(res.Value) != "first"):
		t.Fatalf("retry after the holder committed: %+v, %v; want the first answer replayed", res, err)
	}
	if n := bizRows(t, f.db, f.biz, key); n != 1 {
		t.Fatalf("%d business rows, want the holder's alone", n)
	}
}
