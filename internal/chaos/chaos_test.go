//go:build unix

package chaos

import (
	"cmp"
	"context"
	"io"
	"log"
	"os"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/idemkit/idemkit/internal/testsvc"
)

// TestMain lets Run re-execute this test binary as a worker process.
func TestMain(m *testing.M) {
	RunWorkerIfRequested()
	_ = mysql.SetLogger(log.New(io.Discard, "", 0)) // MariaDB restarts on purpose
	os.Exit(m.Run())
}

// requireServers skips (or, under IDEMKIT_REQUIRE_SERVICES=1, fails) when the binaries for the
// private servers of a run on database db are missing.
func requireServers(t *testing.T, db string) {
	t.Helper()
	d, err := dialectOf(db)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.available(); err != nil {
		testsvc.Unavailable(t, "a private "+db+" server", err)
	}
	if err := RedisAvailable(); err != nil {
		testsvc.Unavailable(t, "redis-server", err)
	}
}

// runChaos runs the harness with cfg, bounded, logging progress to t.
func runChaos(t *testing.T, cfg Config) *Report {
	t.Helper()
	requireServers(t, cmp.Or(cfg.Database, MariaDB))
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cfg.Logf = t.Logf
	rep, err := Run(ctx, &cfg)
	if err != nil {
		t.Fatalf("the harness could not run: %v", err)
	}
	return rep
}

// TestChaos is the CI configuration: three workers and six clients for 45s over the five paths,
// with every fault injected (a worker SIGKILLed in an Execute-mode function, then in a Tx-mode one
// and a TxMark one, Redis restarted empty, a worker frozen past its lease in Execute mode or HTTP,
// a worker SIGKILLed in a Mark-mode function, MariaDB restarted, a worker frozen in a Mark-mode
// function). The checker must find nothing, every fault kind must have been injected, a stall must
// show the fence refusing the frozen attempt's business write, and the Mark-mode stall the mark
// holding its key.
func TestChaos(t *testing.T) {
	// Every fault, and a worker killed inside the business of each path in turn: Execute mode, Tx
	// mode, the mark (TxMark) and Mark mode, writes done and the commit pending.
	rep := runChaos(t, Config{Duration: 45 * time.Second, Workers: 3, Clients: 6, FaultInterval: 4 * time.Second,
		Faults: []FaultKind{FaultWorkerKill, FaultWorkerKill, FaultRedisRestart, FaultWorkerKill, FaultWorkerStall, FaultWorkerKill,
			FaultMariaDBRestart, FaultWorkerStall}})
	checkChaos(t, rep, MariaDB)
	if rep.WorkerTotals.MultiTx == 0 {
		t.Errorf("no Guard-owned transaction ran on multi-statement packets")
	}
	killed := map[string]bool{}
	markHeld := false
	for _, f := range rep.Faults {
		if f.Kind == FaultWorkerKill && f.Injected {
			killed[f.Path] = true
		}
		markHeld = markHeld || f.Kind == FaultWorkerStall && f.Path == PathMarkExec && f.Shown()
	}
	for _, p := range []string{PathExec, PathTx, PathMark, PathMarkExec} {
		if !killed[p] {
			t.Errorf("no worker was killed inside the business of the %s path (killed: %v)", p, killed)
		}
	}
	if !markHeld {
		t.Errorf("no stall showed a frozen Mark-mode function holding its key and applying its transfer once resumed")
	}
	if rep.Check.MarkKilled == 0 {
		t.Errorf("the checker saw no Mark-mode key hit by a kill")
	}
}

// TestChaosPostgres is TestChaos on a private PostgreSQL: the same paths, business and checker, the
// database restarted by a fast shutdown and by SIGKILL of the server and its backends, and
// PostgreSQL's group commit (claims in one INSERT … ON CONFLICT DO NOTHING, finishes in one
// UPDATE … FROM VALUES) under every fault.
func TestChaosPostgres(t *testing.T) {
	rep := runChaos(t, Config{Database: Postgres, Duration: 25 * time.Second, Workers: 3, Clients: 6, FaultInterval: 4 * time.Second,
		// PostgreSQL restarted twice: a fast shutdown, then SIGKILL.
		Faults: []FaultKind{FaultPostgresRestart, FaultWorkerKill, FaultRedisRestart, FaultWorkerStall, FaultPostgresRestart}})
	checkChaos(t, rep, Postgres)
}

// checkChaos fails t unless rep, a run on database db with every fault, found no violation, injected
// every fault kind, showed a stall refused by the fence, and checked effects and duplicates.
func checkChaos(t *testing.T, rep *Report, db string) {
	t.Helper()
	t.Log("\n" + rep.Summary(20))
	if v := rep.Violations(); len(v) > 0 {
		t.Fatalf("%d violations (see the summary above)", len(v))
	}
	for _, k := range AllFaultsOn(db) {
		if rep.FaultsByKind[k] == 0 {
			t.Errorf("fault %s was never injected", k)
		}
	}
	refused := 0
	for _, f := range rep.Faults {
		if f.Kind == FaultWorkerStall && f.Path != PathMarkExec && f.Shown() {
			refused++
		}
	}
	if refused == 0 {
		t.Errorf("no stall showed the fence refusing the frozen attempt's business write")
	}
	if rep.Check.Effects == 0 || rep.Duplicates == 0 {
		t.Errorf("the run checked %d effects and sent %d duplicates; want both above zero", rep.Check.Effects, rep.Duplicates)
	}
}

// TestChaosCatchesDroppedUniqueIndex runs the harness with the record table's primary key on
// (scope, idem_key) replaced by a plain index: duplicates that reach the database both write their key
// (Tx-mode calls without a Locker race past each other's read before the function), and the checker
// must report the duplicate effects.
func TestChaosCatchesDroppedUniqueIndex(t *testing.T) {
	rep := runChaos(t, Config{Duration: 6 * time.Second, Workers: 2, Clients: 4, Faults: []FaultKind{}, Sabotage: SabotageDropUniqueIndex})
	t.Log("\n" + rep.Summary(5))
	if n := countKind(rep, ViolationDuplicateEffect); n == 0 {
		t.Fatalf("the checker found no duplicate effect with the unique index dropped (%d violations)", len(rep.Violations()))
	}
}

// TestChaosCatchesIgnoredFence runs the harness with Stores that retry a fenced write on the
// current version: when a frozen worker resumes, its finish overwrites the attempt that took its
// key over, and the checker must report the lost write — on MariaDB and on PostgreSQL, so that a
// checker reading nothing on either could not pass.
func TestChaosCatchesIgnoredFence(t *testing.T) {
	for _, db := range []string{MariaDB, Postgres} {
		t.Run(db, func(t *testing.T) {
			rep := runChaos(t, Config{Database: db, Duration: 6 * time.Second, Workers: 2, Clients: 4, Faults: []FaultKind{FaultWorkerStall},
				FaultInterval: 2 * time.Second, Sabotage: SabotageIgnoreFence})
			t.Log("\n" + rep.Summary(5))
			if rep.FaultsByKind[FaultWorkerStall] == 0 {
				t.Fatal("no stall was injected")
			}
			if n := countKind(rep, ViolationLostWrite) + countKind(rep, ViolationInconsistentAnswer); n == 0 {
				t.Fatalf("the checker found no lost write with the fence check ignored (%d violations)", len(rep.Violations()))
			}
		})
	}
}

func countKind(rep *Report, kind string) int {
	n := 0
	for _, v := range rep.Violations() {
		if v.Kind == kind {
			n++
		}
	}
	return n
}
