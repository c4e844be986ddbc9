package grpcx_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/chaosrpc"
	"github.com/idemkit/idemkit/internal/testsvc"
)

// TestChaosKillsAndDuplicates runs the chaos scenario small: two server processes (this test binary
// re-executed) guarding Charge in Tx mode on MariaDB, one with a Redis Locker and one without (its
// duplicates meet the other's in the database only), six clients over loopback TCP
// sending 30 % duplicates, server processes SIGKILLed mid-call and restarted. The checker finds one
// ledger row per key answered OK, none for refused keys, conserved money, every answer of a key
// byte-identical to the response its record stores (read with plain SQL) and that response to its
// ledger row, ABORTED always with RetryInfo, FAILED_PRECONDITION for a reused key with another
// payload.
func TestChaosKillsAndDuplicates(t *testing.T) {
	if testing.Short() {
		t.Skip("starts server processes and kills them")
	}
	testsvc.MySQL(t, nil) // creates the test database, or fails/skips without MariaDB
	testsvc.Redis(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rep, err := chaosrpc.Run(ctx, &chaosrpc.Config{
		DSN:     testsvc.MySQLDSN() + testsvc.Database,
		Redis:   testsvc.RedisAddr(),
		Servers: 2,
		Clients: 6,
		Ops:     500,
		Kills:   3,
		Logf:    t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(rep.Summary())
	if len(rep.Violations) > 0 {
		t.Fatalf("%d violations", len(rep.Violations))
	}
	if rep.Kills == 0 || rep.Duplicates == 0 || rep.Replayed == 0 || rep.Rejected == 0 || rep.NoLocker == 0 {
		t.Fatalf("the run did not exercise what it should: %+v", rep)
	}
}

// TestChaosCatchesBareServer: the same run against servers without the interceptor must report
// duplicate effects, so the checker above can fail.
func TestChaosCatchesBareServer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts server processes")
	}
	db := testsvc.MySQL(t, nil)
	prefix := testsvc.Name("grpcbare")
	tables := chaosrpc.NewTables(prefix)
	for _, tb := range []string{tables.Accounts, tables.Ledger, tables.Records} {
		testsvc.DropTable(t, db, tb) // the run keeps its tables when it finds violations
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := chaosrpc.Run(ctx, &chaosrpc.Config{
		DSN: testsvc.MySQLDSN() + testsvc.Database, Redis: "-", Servers: 1, Clients: 4, Ops: 200, Kills: -1, Bare: true,
		Prefix: prefix,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Violations) == 0 {
		t.Fatalf("no violation found against an unguarded server: %s", rep.Summary())
	}
	dups := 0
	for _, v := range rep.Violations {
		if strings.Contains(v, "took effect") {
			dups++
		}
	}
	if dups == 0 {
		t.Fatalf("no duplicate effect reported against an unguarded server: %s", rep.Summary())
	}
	t.Logf("unguarded server: %d violations, %d duplicate effects", len(rep.Violations), dups)
}
