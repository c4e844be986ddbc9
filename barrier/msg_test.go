package barrier

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/dtm-labs/client/dtmcli"
	"gorm.io/gorm"

	"github.com/idemkit/idemkit/internal/testsvc"
)

// TestQueryPrepared: the back-check answers nil for a committed local transaction and
// ErrMsgRolledBack otherwise, after which that local transaction can never commit.
func TestQueryPrepared(t *testing.T) {
	eachDialect(t, func(t *testing.T, db *gorm.DB) {
		ctx := context.Background()
		g := newGormTable(t, db)
		local := func(gid string) error {
			return db.Transaction(func(tx *gorm.DB) error {
				b, err := MsgBranch(gid)
				if err != nil {
					return err
				}
				_, err = g.Enter(ctx, tx, b)
				return err
			})
		}
		committed := testsvc.Name("gid-")
		if err := local(committed); err != nil {
			t.Fatal(err)
		}
		if err := g.QueryPrepared(ctx, committed); err != nil {
			t.Fatalf("committed: %v", err)
		}
		if err := g.QueryPrepared(ctx, committed); err != nil {
			t.Fatalf("committed, asked again: %v", err)
		}
		never := testsvc.Name("gid-")
		if err := g.QueryPrepared(ctx, never); !errors.Is(err, ErrMsgRolledBack) {
			t.Fatalf("never committed: %v", err)
		}
		if err := local(never); !errors.Is(err, ErrDuplicate) {
			t.Fatalf("local transaction after the back-check: %v, want ErrDuplicate", err)
		}
		if err := g.QueryPrepared(ctx, ""); !errors.Is(err, ErrInvalidBranch) {
			t.Fatalf("empty gid: %v", err)
		}
	})
}

// TestQueryPreparedDTMCompatibility: the rows of dtmcli's msg local transaction (Msg.DoAndSubmitDB's
// barrier) and of this back-check honour each other on the same table. (dtmcli's own
// BranchBarrier.QueryPrepared reads the global table name whatever BarrierTableName says, so it cannot
// be pointed at a test table.)
func TestQueryPreparedDTMCompatibility(t *testing.T) {
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
			theirLocal := func(gid string) error {
				bb, _ := dtmcli.BarrierFrom(TransMsg, gid, "00", OpMsg)
				bb.DBType, bb.BarrierTableName = d.dbType, g.Table()
				return bb.CallWithDB(sqlDB, func(*sql.Tx) error { return nil })
			}
			// dtmcli's local transaction, our back-check.
			gid := testsvc.Name("gid-")
			if err := theirLocal(gid); err != nil {
				t.Fatal(err)
			}
			if err := g.QueryPrepared(ctx, gid); err != nil {
				t.Fatalf("our back-check of dtmcli's commit: %v", err)
			}
			// Our back-check first, dtmcli's then agrees.
			gid = testsvc.Name("gid-")
			if err := g.QueryPrepared(ctx, gid); !errors.Is(err, ErrMsgRolledBack) {
				t.Fatal(err)
			}
			if err := theirLocal(gid); !errors.Is(err, dtmcli.ErrDuplicated) {
				t.Fatalf("dtmcli's local transaction after our back-check: %v, want ErrDuplicated", err)
			}
		})
	}
}

// TestQueryPreparedPostgresRefusesNUL: a gid PostgreSQL text cannot hold is a bad gid for the
// back-check too (ErrInvalidBranch, answered 400), as it is for Enter; it was sent to the database,
// whose refusal came back as a database error (500, "ask again later") on every back-check.
func TestQueryPreparedPostgresRefusesNUL(t *testing.T) {
	db := testsvc.Postgres(t, nil)
	g := newGormTable(t, db)
	if err := g.QueryPrepared(context.Background(), "msg-a\x00b"); !errors.Is(err, ErrInvalidBranch) {
		t.Fatalf("back-check of a gid with NUL on PostgreSQL: %v, want ErrInvalidBranch", err)
	}
}
