package barrier

import (
	"context"
	"strings"
	"testing"

	"gorm.io/gorm"

	"github.com/idemkit/idemkit/internal/testsvc"
)

// TestGormPostgresRefusesANonUTF8ClientEncoding: pgx sends text as UTF-8 and the server converts it
// from the session's client_encoding, so on a LATIN1 or WIN1252 session the gid "g-é" was stored as
// "g-Ã©": a delivery through a barrier on such a session and one through a barrier on a UTF8 session
// both ran the business. The barrier checks the session's encoding before its first statement and
// refuses, naming the setting; UTF8 and SQL_ASCII (no conversion) are served.
func TestGormPostgresRefusesANonUTF8ClientEncoding(t *testing.T) {
	ctx := context.Background()
	owner := newGormTable(t, testsvc.Postgres(t, nil))
	for _, enc := range []string{"LATIN1", "WIN1252", "EUC_JP", "SQL_ASCII", "UTF8"} {
		t.Run(enc, func(t *testing.T) {
			other := testsvc.PostgresWith(t, nil, " client_encoding="+enc)
			g, err := NewGorm(other, &GormOptions{Table: owner.Table()})
			if err != nil {
				t.Fatal(err)
			}
			gid := "g-é-" + testsvc.Name("")
			b, _ := NewBranch(TransSaga, gid, "01", OpAction)
			if out, err := owner.TransactionOutcome(ctx, b, func(*gorm.DB) error { return nil }); err != nil || out != Proceed {
				t.Fatalf("first delivery on a UTF8 session: %s, %v; want Proceed", out, err)
			}
			b, _ = NewBranch(TransSaga, gid, "01", OpAction)
			out, err := g.TransactionOutcome(ctx, b, func(*gorm.DB) error { return nil })
			if enc == "UTF8" || enc == "SQL_ASCII" {
				if err != nil || out != Duplicate {
					t.Fatalf("repeated delivery on a %s session: %s, %v; want Duplicate", enc, out, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), "client_encoding") {
				t.Fatalf("repeated delivery on a %s session: %s, %v; want an error naming client_encoding", enc, out, err)
			}
			if err := g.QueryPrepared(ctx, gid); err == nil || !strings.Contains(err.Error(), "client_encoding") {
				t.Fatalf("back-check on a %s session: %v; want an error naming client_encoding", enc, err)
			}
			// A transaction of such a gorm.DB entered through the UTF8 barrier is refused too.
			tx := other.Begin()
			defer tx.Rollback()
			b, _ = NewBranch(TransSaga, gid, "01", OpAction)
			if out, err := owner.Enter(ctx, tx, b); err == nil || !strings.Contains(err.Error(), "client_encoding") {
				t.Fatalf("Enter on a %s transaction: %s, %v; want an error naming client_encoding", enc, out, err)
			}
		})
	}
}
