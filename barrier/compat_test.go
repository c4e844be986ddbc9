package barrier

import (
	"context"
	"database/sql"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

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

// TestGormPostgresCancelRacingDTMCliCancel: on PostgreSQL a cancel of this barrier delivered while
// dtmcli's delivery of the same cancel runs (a branch moving from dtmcli to idemkit, or two services
// sharing the table) waits for it and is a duplicate. The rows went in the unique key's order (cancel
// before try, for MySQL/MariaDB's gap locks), while dtmcli inserts the try row first: each held the row
// the other inserted next, and PostgreSQL's deadlock detector failed one delivery (a 500, after
// deadlock_timeout). PostgreSQL locks no gaps, so DTM's order, origin first, deadlocks with nobody.
//
// A trigger holds dtmcli's insert of its cancel row (after its try row) until this barrier's delivery
// waits on that try row: the interleaving that deadlocked, every time.
func TestGormPostgresCancelRacingDTMCliCancel(t *testing.T) {
	ctx := context.Background()
	db := testsvc.Postgres(t, nil)
	g := newGormTable(t, db)
	schema := strings.Split(g.Table(), ".")[0]
	const app = "dtmcli_racing_cancel"
	sqlDB, err := db.DB()
	if err != nil {
		t.Fatal(err)
	}
	theirDB, err := testsvc.PostgresWith(t, nil, " application_name="+app).DB()
	if err != nil {
		t.Fatal(err)
	}
	var key int64
	if err := db.Raw("SELECT hashtext(?)", schema).Scan(&key).Error; err != nil {
		t.Fatal(err)
	}
	for _, stmt := range []string{
		`CREATE FUNCTION ` + schema + `.hold() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
			IF NEW.op = 'cancel' AND current_setting('application_name') = '` + app + `' THEN
				PERFORM pg_advisory_xact_lock_shared(` + strconv.FormatInt(key, 10) + `);
			END IF;
			RETURN NEW;
		END $$`,
		"CREATE TRIGGER hold BEFORE INSERT ON " + g.Table() + " FOR EACH ROW EXECUTE FUNCTION " + schema + ".hold()",
	} {
		if err := db.Exec(stmt).Error; err != nil {
			t.Fatal(err)
		}
	}
	// waitFor waits until a barrier statement of the schema waits on a lock of the kind given.
	waitFor := func(what, cond string) {
		t.Helper()
		for range 500 {
			var n int64
			if err := db.Raw("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND "+cond+
				" AND query LIKE ?", "%"+schema+"%").Scan(&n).Error; err != nil {
				t.Fatal(err)
			}
			if n > 0 {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatalf("%s never waited", what)
	}

	for round := range 3 {
		gid := testsvc.Name("gid-")
		holder, err := sqlDB.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := holder.ExecContext(ctx, "SELECT pg_advisory_lock($1)", key); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var theirErr, ourErr error
		var theirsRan bool
		var ours Outcome
		wg.Go(func() {
			bb, err := dtmcli.BarrierFromQuery(map[string][]string{"trans_type": {TransTCC}, "gid": {gid}, "branch_id": {"01"}, "op": {OpCancel}})
			if err != nil {
				theirErr = err
				return
			}
			bb.DBType, bb.BarrierTableName = dtmcli.DBTypePostgres, g.Table()
			theirErr = bb.CallWithDB(theirDB, func(*sql.Tx) error { theirsRan = true; return nil })
		})
		waitFor("dtmcli's cancel row", "wait_event = 'advisory' AND application_name = '"+app+"'")
		wg.Go(func() {
			b, _ := NewBranch(TransTCC, gid, "01", OpCancel)
			ours, ourErr = g.TransactionOutcome(ctx, b, func(*gorm.DB) error { return nil })
		})
		waitFor("our cancel", "wait_event = 'transactionid' AND application_name <> '"+app+"'")
		if _, err := holder.ExecContext(ctx, "SELECT pg_advisory_unlock($1)", key); err != nil {
			t.Fatal(err)
		}
		_ = holder.Close()
		wg.Wait()
		if theirErr != nil || ourErr != nil || theirsRan || ours != Duplicate {
			t.Fatalf("round %d: dtmcli's cancel: ran=%v, %v; ours after it: %s, %v; want a null compensation and a duplicate, no error",
				round, theirsRan, theirErr, ours, ourErr)
		}
	}
}
