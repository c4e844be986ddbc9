package dtmmsg_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/chaosdtmmsg"
	"github.com/idemkit/idemkit/internal/testsvc"
)

// runChaos runs the msg chaos scenario against the shared DTM server and fails t on violations.
func runChaos(t *testing.T, c chaosdtmmsg.Config) *chaosdtmmsg.Report {
	t.Helper()
	testsvc.MySQL(t, nil)
	c.DTM = shared.Get(t).URL()
	c.DSN = testsvc.MySQLDSN() + testsvc.Database
	c.Logf = t.Logf
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	rep, err := chaosdtmmsg.Run(ctx, &c)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(rep.Summary())
	if len(rep.Violations) > 0 {
		t.Fatalf("%d violations", len(rep.Violations))
	}
	return rep
}

// TestKillBetweenCommitAndSubmit: publisher processes (this test binary) die between the local commit
// and the submit (a proxy holds the submit, then the process is SIGKILLed): DTM's back-check finds
// the commit and publishes each message once; the Reconciler settles the records SUCCEEDED; a later
// duplicate of each key is replayed and publishes nothing.
func TestKillBetweenCommitAndSubmit(t *testing.T) {
	if testing.Short() {
		t.Skip("starts publisher processes and kills them")
	}
	rep := runChaos(t, chaosdtmmsg.Config{
		Publications: 4, Parallel: 2, DupRate: -1, FailRate: -1, KillRate: 1,
		KillPoints: []string{chaosdtmmsg.KillAfterCommit},
	})
	if rep.Kills[chaosdtmmsg.KillAfterCommit] != 4 || rep.Published != 4 || rep.Reconciled != 4 {
		t.Fatalf("want 4 kills after commit, 4 messages published by the back-check, 4 records reconciled: %+v", rep)
	}
}

// TestKillInsideLocalTransaction: publishers die inside the local transaction: it never commits, the
// back-check answers FAILURE, nothing is published and the records end FAILED.
func TestKillInsideLocalTransaction(t *testing.T) {
	if testing.Short() {
		t.Skip("starts publisher processes and kills them")
	}
	rep := runChaos(t, chaosdtmmsg.Config{
		Publications: 3, Parallel: 3, DupRate: -1, FailRate: -1, KillRate: 1,
		KillPoints: []string{chaosdtmmsg.KillInLocal},
	})
	if rep.Kills[chaosdtmmsg.KillInLocal] != 3 || rep.Committed != 0 || rep.Published != 0 || rep.Reconciled != 3 {
		t.Fatalf("want 3 kills in the local transaction, nothing committed or published, 3 records reconciled: %+v", rep)
	}
}

// TestChaosMixed: duplicates, failing local transactions and kills at every point, in parallel.
func TestChaosMixed(t *testing.T) {
	if testing.Short() {
		t.Skip("starts publisher processes and kills them")
	}
	rep := runChaos(t, chaosdtmmsg.Config{Publications: 30, Parallel: 4})
	if rep.Duplicates == 0 || rep.Published == 0 {
		t.Fatalf("the run did not exercise what it should: %+v", rep)
	}
}

// TestChaosCatchesBrokenBackCheck: with a back-check that answers SUCCESS for a local transaction that
// never committed, the checker reports messages published without their commit.
func TestChaosCatchesBrokenBackCheck(t *testing.T) {
	if testing.Short() {
		t.Skip("starts publisher processes and kills them")
	}
	db := testsvc.MySQL(t, nil)
	prefix := testsvc.Name("msgbroken")
	tb := chaosdtmmsg.NewTables(prefix)
	for _, name := range []string{tb.Barrier, tb.Records, tb.Orders, tb.Inbox} {
		testsvc.DropTable(t, db, name) // the run keeps its tables when it finds violations
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := chaosdtmmsg.Run(ctx, &chaosdtmmsg.Config{
		Prefix: prefix,
		DSN:    testsvc.MySQLDSN() + testsvc.Database, DTM: shared.Get(t).URL(), Publications: 2, Parallel: 2,
		DupRate: -1, FailRate: -1, KillRate: 1, KillPoints: []string{chaosdtmmsg.KillInLocal}, BrokenBackCheck: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, v := range rep.Violations {
		found = found || strings.Contains(v, "published without a committed local transaction")
	}
	if !found {
		t.Fatalf("the checker missed the broken back-check: %s", rep.Summary())
	}
}
