package barrier

import (
	"context"
	"errors"
	"testing"

	"gorm.io/gorm"

	"github.com/idemkit/idemkit/internal/testsvc"
)

// TestGormGidsDifferingInCaseAreDistinct: two global transactions whose gids differ only in case,
// accents or trailing spaces are two transactions (DTM's default stores, boltdb and Redis, compare
// gids byte for byte, and so does the record table). The MySQL barrier table of sql/barrier_mysql.sql
// took the server's default collation (utf8mb4_general_ci: case- and accent-insensitive, PAD SPACE),
// so the second transaction's branch found the first one's row, was taken for a duplicate
// delivery, and its business never ran; and a 2-phase message's back-check found another message's
// committed row and answered that its own local transaction had committed.
func TestGormGidsDifferingInCaseAreDistinct(t *testing.T) {
	eachDialect(t, func(t *testing.T, db *gorm.DB) {
		ctx := context.Background()
		g := newGormTable(t, db)
		if err := g.CreateTable(ctx); err != nil {
			t.Fatal(err)
		}
		base := testsvc.Name("Gid-")
		for _, pair := range [][2]string{{base + "-A", base + "-a"}, {base + "-e", base + "-é"}, {base + "-s", base + "-s "}} {
			for _, gid := range pair {
				b, err := NewBranch(TransSaga, gid, "01", OpAction)
				if err != nil {
					t.Fatal(err)
				}
				ran := false
				err = g.Transaction(ctx, b, func(*gorm.DB) error { ran = true; return nil })
				if err != nil || !ran {
					t.Fatalf("gid %q (after %q): ran=%v, %v; want its action run: another transaction's branch", gid, pair[0], ran, err)
				}
			}
			// A 2-phase message's back-check: the first gid's local transaction committed, the
			// second's never ran. Its back-check must answer rolled back, not the first's commit
			// (DTM would then deliver a message whose local transaction never happened).
			first, err := MsgBranch("msg-" + pair[0])
			if err != nil {
				t.Fatal(err)
			}
			if err := g.Transaction(ctx, first, func(*gorm.DB) error { return nil }); err != nil {
				t.Fatal(err)
			}
			if err := g.QueryPrepared(ctx, "msg-"+pair[1]); !errors.Is(err, ErrMsgRolledBack) {
				t.Fatalf("back-check of msg gid %q (after %q committed): %v; want ErrMsgRolledBack", "msg-"+pair[1], "msg-"+pair[0], err)
			}
		}
	})
}
