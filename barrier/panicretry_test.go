package barrier

import (
	"context"
	"testing"

	"gorm.io/gorm"

	"github.com/idemkit/idemkit/internal/testsvc"
)

// TestGormRetryAfterAPanicWithTheSameBranch: a business that panicked rolled its transaction back,
// barrier rows included, and a caller that recovers the panic and runs the call again with the same
// Branch (a retry helper turning panics into errors) must use the same barrier id, as after an
// error. The panic left the id counted: the retry committed under the next id, and a redelivery (a
// new Branch, from the first id) ran the business a second time.
func TestGormRetryAfterAPanicWithTheSameBranch(t *testing.T) {
	ctx := context.Background()
	recovering := func(f func()) {
		defer func() { _ = recover() }()
		f()
	}
	for _, c := range []struct {
		name string
		call func(g *Gorm, db *gorm.DB, b *Branch, fn func(*gorm.DB) error) error
	}{
		{"Transaction", func(g *Gorm, _ *gorm.DB, b *Branch, fn func(*gorm.DB) error) error {
			return g.Transaction(ctx, b, fn)
		}},
		{"Call in db.Transaction", func(g *Gorm, db *gorm.DB, b *Branch, fn func(*gorm.DB) error) error {
			return db.Transaction(func(tx *gorm.DB) error { return g.Call(ctx, tx, b, fn) })
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			eachDialect(t, func(t *testing.T, db *gorm.DB) {
				g := newGormTable(t, db)
				gid := testsvc.Name("gid-")
				runs := 0
				b, _ := NewBranch(TransSaga, gid, "01", OpAction)
				recovering(func() { _ = c.call(g, db, b, func(*gorm.DB) error { panic("business panicked") }) })
				if err := c.call(g, db, b, func(*gorm.DB) error { runs++; return nil }); err != nil {
					t.Fatal(err)
				}
				redelivery, _ := NewBranch(TransSaga, gid, "01", OpAction)
				out, err := g.TransactionOutcome(ctx, redelivery, func(*gorm.DB) error { runs++; return nil })
				if err != nil || out != Duplicate || runs != 1 {
					t.Fatalf("redelivery after a call retried past a panic: %s, %v, business ran %d times; want Duplicate, once", out, err, runs)
				}
			})
		})
	}
}
