package barrier

import (
	"context"
	"database/sql"
	"testing"

	"github.com/dtm-labs/client/dtmcli"
	"gorm.io/gorm"

	"github.com/idemkit/idemkit/internal/testsvc"
)

// TestDTMCompatibility: rows written by dtmcli's own barrier (BarrierFromQuery + CallWithDB on the same
// table) are honoured by this barrier, and the other way round, on the databases dtmcli supports.
func TestDTMCompatibility(t *testing.T) {
	for _, d := range []struct {
		name, dbType string
		open         func(testing.TB, *gorm.Config) *gorm.DB
	}{{"mysql", dtmcli.DBTypeMysql, testsvc.MySQL}, {"postgres", dtmcli.DBTypePostgres, testsvc.Postgres}} {
		t.Run(d.name, func(t *testing.T) {
			ctx := context.Background()
			db := d.open(t, nil)
			g := newGormTable(t, db)
			sqlDB, err := db.DB()
			if err != nil {
				t.Fatal(err)
			}
			// theirs runs one delivery through dtmcli and reports whether its business ran.
			theirs := func(transType, gid, op string) bool {
				t.Helper()
				q := map[string][]string{"trans_type": {transType}, "gid": {gid}, "branch_id": {"01"}, "op": {op}}
				bb, err := dtmcli.BarrierFromQuery(q)
				if err != nil {
					t.Fatal(err)
				}
				bb.DBType, bb.BarrierTableName = d.dbType, g.Table()
				ran := false
				if err := bb.CallWithDB(sqlDB, func(*sql.Tx) error { ran = true; return nil }); err != nil {
					t.Fatalf("dtmcli %s %s: %v", gid, op, err)
				}
				return ran
			}
			// ours runs one delivery through this barrier and reports its outcome.
			ours := func(transType, gid, op string) Outcome {
				t.Helper()
				b, _ := NewBranch(transType, gid, "01", op)
				out, err := g.TransactionOutcome(ctx, b, func(*gorm.DB) error { return nil })
				if err != nil {
					t.Fatalf("barrier %s %s: %v", gid, op, err)
				}
				return out
			}
			expect := func(what string, got, want any) {
				t.Helper()
				if got != want {
					t.Errorf("%s: got %v, want %v", what, got, want)
				}
			}

			gid := testsvc.Name("gid-")
			expect("dtmcli action runs", theirs(TransSaga, gid, OpAction), true)
			expect("our action after dtmcli's", ours(TransSaga, gid, OpAction), Duplicate)
			expect("our compensate after dtmcli's action", ours(TransSaga, gid, OpCompensate), Proceed)
			expect("dtmcli compensate after ours", theirs(TransSaga, gid, OpCompensate), false)

			gid = testsvc.Name("gid-")
			expect("our action runs", ours(TransSaga, gid, OpAction), Proceed)
			expect("dtmcli action after ours", theirs(TransSaga, gid, OpAction), false)
			expect("dtmcli compensate after our action", theirs(TransSaga, gid, OpCompensate), true)
			expect("our compensate after dtmcli's", ours(TransSaga, gid, OpCompensate), Duplicate)

			gid = testsvc.Name("gid-")
			expect("dtmcli null cancel", theirs(TransTCC, gid, OpCancel), false)
			expect("our cancel after dtmcli's", ours(TransTCC, gid, OpCancel), Duplicate)
			expect("our late try after dtmcli's cancel", ours(TransTCC, gid, OpTry), Hanging)

			gid = testsvc.Name("gid-")
			expect("our null cancel", ours(TransTCC, gid, OpCancel), NullCompensation)
			expect("dtmcli cancel after ours", theirs(TransTCC, gid, OpCancel), false)
			expect("dtmcli late try after our cancel", theirs(TransTCC, gid, OpTry), false)

			gid = testsvc.Name("gid-")
			expect("dtmcli try", theirs(TransTCC, gid, OpTry), true)
			expect("our confirm", ours(TransTCC, gid, OpConfirm), Proceed)
			expect("dtmcli confirm after ours", theirs(TransTCC, gid, OpConfirm), false)

			// Same rows, column for column.
			var rows []struct{ TransType, Gid, BranchID, Op, BarrierID, Reason string }
			if err := db.Raw("SELECT trans_type, gid, branch_id, op, barrier_id, reason FROM "+g.Table()+" WHERE gid = ? ORDER BY id", gid).Scan(&rows).Error; err != nil {
				t.Fatal(err)
			}
			want := []struct{ TransType, Gid, BranchID, Op, BarrierID, Reason string }{
				{"tcc", gid, "01", "try", "01", "try"}, {"tcc", gid, "01", "confirm", "01", "confirm"}}
			if len(rows) != 2 || rows[0] != want[0] || rows[1] != want[1] {
				t.Fatalf("rows %+v, want %+v", rows, want)
			}
		})
	}
}
