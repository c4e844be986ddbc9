//go:build unix

package chaos

import (
	"cmp"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Defaults of [Config].
const (
	DefaultDuration       = 30 * time.Second
	DefaultWorkers        = 3
	DefaultClients        = 8
	DefaultMaxRequests    = 1_000_000
	DefaultLease          = 1500 * time.Millisecond
	DefaultLockTTL        = time.Second
	DefaultSweepInterval  = 500 * time.Millisecond
	DefaultFaultInterval  = 5 * time.Second
	DefaultFlakyRate      = 0.03
	DefaultRejectEvery    = 17
	DefaultAccounts       = 16
	DefaultInitialBalance = int64(1_000_000_000)
)

// FaultKind names a fault the harness injects.
type FaultKind string

// The faults. Each is bounded in time and restores the system before the next one starts.
const (
	// FaultRedisRestart SIGKILLs the private redis-server and starts an empty one on the same port:
	// locks and cached results are gone.
	FaultRedisRestart FaultKind = "redis_restart"
	// FaultMariaDBRestart stops the private mariadbd (SIGTERM and SIGKILL alternately), keeps it down
	// a moment and starts it on the same data.
	FaultMariaDBRestart FaultKind = "mariadb_restart"
	// FaultPostgresRestart stops the private PostgreSQL (a fast shutdown, SIGINT, and SIGKILL of the
	// server and its backends alternately), keeps it down a moment and starts it on the same data:
	// the runs on PostgreSQL ([Config.Database]) inject it instead of FaultMariaDBRestart.
	FaultPostgresRestart FaultKind = "postgres_restart"
	// FaultWorkerKill SIGKILLs a worker while it is inside a business function, after its writes and
	// before its commit, then starts a replacement.
	FaultWorkerKill FaultKind = "worker_kill"
	// FaultWorkerStall freezes a worker (SIGSTOP) inside a business function of Execute mode or the
	// HTTP path, before its business write, past its lock TTL and lease; another worker takes the key
	// over and finishes it; then the frozen worker resumes (SIGCONT) with a stale fence. Every other
	// stall freezes a Mark-mode function (guard.Mark) the same way: a mark has no lease, so the
	// retry is answered as a duplicate, and the resumed function applies its transfer.
	FaultWorkerStall FaultKind = "worker_stall"
)

// AllFaults returns every fault kind of a run on MariaDB, in the order a run cycles through them by
// default. AllFaultsOn gives those of a run on either database.
func AllFaults() []FaultKind { return AllFaultsOn(MariaDB) }

// AllFaultsOn returns every fault kind of a run on database db (MariaDB or Postgres), in the order a
// run cycles through them by default: the database's restart is its own.
func AllFaultsOn(db string) []FaultKind {
	return []FaultKind{FaultWorkerKill, FaultRedisRestart, FaultWorkerStall, restartOf(db)}
}

// restartOf returns the fault restarting the server of database db.
func restartOf(db string) FaultKind {
	if db == Postgres {
		return FaultPostgresRestart
	}
	return FaultMariaDBRestart
}

// ParseFaults parses a comma-separated list of fault kinds ("all" for every kind of a run on
// MariaDB, "none" for none). A run on PostgreSQL with nil Faults gets its own by default.
func ParseFaults(s string) ([]FaultKind, error) {
	switch strings.TrimSpace(s) {
	case "all", "":
		return AllFaults(), nil
	case "none":
		return []FaultKind{}, nil
	}
	var out []FaultKind
	for _, f := range strings.Split(s, ",") {
		k := FaultKind(strings.TrimSpace(f))
		switch k {
		case FaultRedisRestart, FaultMariaDBRestart, FaultPostgresRestart, FaultWorkerKill, FaultWorkerStall:
			out = append(out, k)
		default:
			return nil, fmt.Errorf("chaos: unknown fault %q (want %v, %s, all or none)", f, AllFaults(), FaultPostgresRestart)
		}
	}
	return out, nil
}

// Sabotage breaks the system under test on purpose, to prove the checker catches what it should.
type Sabotage string

const (
	// SabotageNone runs idemkit as shipped.
	SabotageNone Sabotage = ""
	// SabotageDropUniqueIndex replaces the record table's UNIQUE (scope, idem_key) with a plain
	// index: duplicates that reach the database both claim the key.
	SabotageDropUniqueIndex Sabotage = "drop-unique-index"
	// SabotageIgnoreFence wraps each worker's Store so that an Update or Delete refused for a stale
	// version is retried blindly on the current one: a stale holder's finish overwrites the attempt
	// that took over.
	SabotageIgnoreFence Sabotage = "ignore-fence"
)

// Config configures [Run]. The zero value works: a 30s run with three workers, eight clients and
// every fault.
type Config struct {
	// Database is the database the records and the business live on: MariaDB (the default) or
	// Postgres, a private server of that kind.
	Database string
	// Duration of the load phase; faults are injected during its first 80%, and after it only a kind
	// that has not shown its effect yet (see [FaultRecord.Shown]). Defaults to DefaultDuration (30s).
	Duration time.Duration
	// Workers is the number of worker processes. Defaults to DefaultWorkers (3); at least 2 (a stall
	// needs another worker to take over).
	Workers int
	// Clients is the number of concurrent load-generator clients. Defaults to DefaultClients (8).
	Clients int
	// MaxRequests bounds the requests of the load phase. Defaults to DefaultMaxRequests.
	MaxRequests int
	// Lease and LockTTL are the workers' idemkit.Options. Default to DefaultLease (1.5s) and
	// DefaultLockTTL (1s): short, so takeovers happen within a run.
	Lease   time.Duration
	LockTTL time.Duration
	// Watchdog sets idemkit.Options.Watchdog in the workers. Defaults to false.
	Watchdog bool
	// SweepInterval is the workers' sweeper interval. Defaults to DefaultSweepInterval (500ms).
	SweepInterval time.Duration
	// Faults are injected in this order, cyclically, one at a time. Nil means [AllFaults]; an empty
	// non-nil slice means none.
	Faults []FaultKind
	// FaultInterval is the time between the starts of two faults. Defaults to DefaultFaultInterval (5s).
	FaultInterval time.Duration
	// MaxFaults bounds the number of faults. Defaults to unbounded (bounded by Duration).
	MaxFaults int
	// FlakyRate is the probability that a business function fails with a retryable error before
	// writing anything. Defaults to DefaultFlakyRate (3%); negative disables.
	FlakyRate float64
	// RejectEvery makes every n-th key of a path an overdraft, a permanent business failure.
	// Defaults to DefaultRejectEvery (17); negative disables.
	RejectEvery int
	// Accounts and InitialBalance shape the business: money moves between Accounts accounts that
	// start with InitialBalance each. Default to DefaultAccounts (16) and DefaultInitialBalance.
	Accounts       int
	InitialBalance int64
	// Sabotage breaks idemkit on purpose (tests of the checker). Defaults to SabotageNone.
	Sabotage Sabotage
	// Dir holds the run's data directories and logs. Defaults to a new temporary directory, removed
	// at the end unless KeepDir is set or the run found violations.
	Dir     string
	KeepDir bool
	// Seed seeds the load generator and the fault schedule. Defaults to the current time.
	Seed int64
	// Logf receives progress lines. Defaults to discarding.
	Logf func(format string, args ...any)
	// WorkerCommand is the executable started in worker mode. Defaults to this process's own
	// executable (os.Executable); it must call [RunWorkerIfRequested] first thing in main (or
	// TestMain).
	WorkerCommand string
}

func (c *Config) withDefaults() (Config, error) {
	var o Config
	if c != nil {
		o = *c
	}
	o.Duration = cmp.Or(o.Duration, DefaultDuration)
	o.Workers = cmp.Or(o.Workers, DefaultWorkers)
	o.Clients = cmp.Or(o.Clients, DefaultClients)
	o.MaxRequests = cmp.Or(o.MaxRequests, DefaultMaxRequests)
	o.Lease = cmp.Or(o.Lease, DefaultLease)
	o.LockTTL = cmp.Or(o.LockTTL, DefaultLockTTL)
	o.SweepInterval = cmp.Or(o.SweepInterval, DefaultSweepInterval)
	o.FaultInterval = cmp.Or(o.FaultInterval, DefaultFaultInterval)
	o.Database = cmp.Or(o.Database, MariaDB)
	if o.Faults == nil {
		o.Faults = AllFaultsOn(o.Database)
	}
	if o.FlakyRate == 0 {
		o.FlakyRate = DefaultFlakyRate
	}
	o.FlakyRate = max(o.FlakyRate, 0)
	o.RejectEvery = cmp.Or(o.RejectEvery, DefaultRejectEvery)
	o.Accounts = cmp.Or(o.Accounts, DefaultAccounts)
	o.InitialBalance = cmp.Or(o.InitialBalance, DefaultInitialBalance)
	if o.Seed == 0 {
		o.Seed = time.Now().UnixNano()
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	var errs []error
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"Duration", o.Duration}, {"Lease", o.Lease}, {"LockTTL", o.LockTTL}, {"SweepInterval", o.SweepInterval}, {"FaultInterval", o.FaultInterval}} {
		if d.v < time.Millisecond {
			errs = append(errs, fmt.Errorf("%s must be at least 1ms, got %s", d.name, d.v))
		}
	}
	if o.Workers < 2 {
		errs = append(errs, fmt.Errorf("Workers must be at least 2, got %d", o.Workers))
	}
	if o.Clients < 1 || o.MaxRequests < 1 || o.Accounts < 2 || o.InitialBalance < 1 {
		errs = append(errs, errors.New("Clients, MaxRequests, InitialBalance must be positive and Accounts at least 2"))
	}
	if o.FlakyRate >= 1 {
		errs = append(errs, fmt.Errorf("FlakyRate must be below 1, got %g", o.FlakyRate))
	}
	if _, err := dialectOf(o.Database); err != nil {
		errs = append(errs, err)
	}
	for _, k := range o.Faults {
		if (k == FaultMariaDBRestart || k == FaultPostgresRestart) && k != restartOf(o.Database) {
			errs = append(errs, fmt.Errorf("fault %s is not one of a run on %s (its restart is %s)", k, o.Database, restartOf(o.Database)))
		}
	}
	switch o.Sabotage {
	case SabotageDropUniqueIndex:
		if o.Database != MariaDB {
			// PostgreSQL's INSERT … ON CONFLICT needs the unique index: without it every claim fails
			// instead of duplicating, and there would be nothing for the checker to catch.
			errs = append(errs, fmt.Errorf("Sabotage %s runs on %s only", o.Sabotage, MariaDB))
		}
	case SabotageNone, SabotageIgnoreFence:
	default:
		errs = append(errs, fmt.Errorf("unknown Sabotage %q", o.Sabotage))
	}
	if err := errors.Join(errs...); err != nil {
		return Config{}, fmt.Errorf("chaos: invalid config: %w", err)
	}
	return o, nil
}
