// Package chaos is idemkit's chaos harness: it tests the promise "each operation takes effect at
// most once, exactly once when answered with success, and nothing is lost" the way storage systems
// are tested — several processes, injected faults, and an independent checker.
//
// [Run] starts, all on loopback:
//
//   - a private database server — mariadbd (a fresh data directory from mariadb-install-db, its own
//     port, socket and pid file) or, with Config.Database = Postgres, PostgreSQL (initdb, its own
//     port and socket directory, run as the user postgres when the harness is root) — and a private
//     redis-server without persistence, so the shared servers other tests use are never touched;
//   - Config.Workers worker processes — this executable re-run in worker mode (call
//     [RunWorkerIfRequested] first thing in main or TestMain) — each with its own idemkit.Guard,
//     gorm pool, go-redis client and sweeper (package sweep, short interval), serving five paths:
//     Execute mode (guard.Do), Tx mode (the business write and the record in one database
//     transaction: record.Store.Tx, the Guard-owned transaction, with and without the Redis Locker,
//     and guard.DoTx in the caller's db.Transaction, picked at random per request), the mark
//     (record.Store.TxMark, the mark and the business write in one Guard-owned transaction, with
//     and without the Locker; duplicates get ErrDuplicate, nothing is replayed), Mark mode
//     (guard.Mark, with and without the Locker: the mark is written SUCCEEDED before the function,
//     whose business commits apart from it; a retryable failure finishes it FAILED and the retry
//     takes it over at the next fence, a permanent one REJECTED with its error text; duplicates get
//     ErrDuplicate) and HTTP (the httpx middleware in front of a handler). On MariaDB every other
//     worker process (alternating per slot and restart) opens its pool with multiStatements=true,
//     so its Guard-owned transactions run on a held connection and send the record's INSERT with
//     the COMMIT (record.Store.BeginTx) — that path meets every fault too;
//   - a load generator whose clients hammer a small window of shared keys with duplicates, some as
//     concurrent bursts to different workers, and log every answer.
//
// The business moves money between accounts: each operation is one ledger row and two balance
// updates in one transaction, so the balances' sum is conserved and the ledger's total must equal
// the sum of the operations answered with success. Every 17th key is an overdraft: a permanent
// failure, stored and replayed. A few functions fail with a retryable error. The ledger has no
// unique key per operation on purpose: at most one row per key is idemkit's promise, not the
// schema's.
//
// On the fenced paths (Execute mode, Mark mode and HTTP), where the business commits apart from the
// record, the business write is conditioned on the claim's fence through a per-key fence register
// (INSERT ... ON DUPLICATE KEY UPDATE fence = IF(fence < ?, ?, fence), ON CONFLICT ... GREATEST on
// PostgreSQL, read back under a row lock): an attempt that was taken over finds a higher fence and
// writes nothing. The register also remembers the ledger row, so an attempt that runs again after
// an earlier one committed but lost its finish (a crash or a database restart between the two)
// adopts that row instead of applying the transfer twice — the fence alone cannot tell "my
// predecessor is stale" from "my predecessor finished its business but not its record". Tx mode
// needs neither: the record and the business commit or roll back together.
//
// While the load runs, faults are injected one at a time, bounded in number and time
// (see [FaultKind]): Redis SIGKILLed and restarted empty; the database stopped (MariaDB: SIGTERM and
// SIGKILL alternately; PostgreSQL: a fast shutdown and SIGKILL of the server and its backends
// alternately) and restarted; a worker SIGKILLed inside a business function after its writes and
// before its commit, of each path in turn (the worker reports "inside" on stdout and waits for the
// kill); a worker frozen with SIGSTOP inside a business function before its business write, for
// longer than its lock TTL and lease, while another worker takes the key over and finishes it, then
// resumed with SIGCONT — its business write is refused by the fence and its finish by the record's
// fence. Every other stall freezes a Mark-mode function instead: a mark has no lease, so the retry is
// answered as a duplicate, and the resumed function applies its transfer.
//
// Mark mode is at most once, and the checker holds it to exactly that: at most one transfer per key
// and none for a REJECTED mark; every key ends SUCCEEDED or REJECTED; at most one request answered
// with a fresh result, carrying the transfer's own values, and no replay (a mark stores none);
// rejections answered with the text the REJECTED mark stores; the transfer under a fence no higher
// than the mark's. A key marked without its transfer is accepted only when a worker was killed
// inside its function or one of its answers left the outcome unknown (a reply lost to a restart).
//
// After the load, the harness waits for the sweepers to leave no record PROCESSING, then drives
// every key once more until it gets a result or a rejection, stops the workers, and runs [Check],
// which reads the tables with plain SQL and verifies the invariants against the clients' answers.
// The report ([Report.Summary]) gives the figures: requests, duplicates, faults by kind, effects
// checked and violations.
//
// Every process is started in its own process group with a parent-death signal, tracked, and
// killed when Run returns, on every path; workers also exit when their stdin, a pipe from the
// harness, closes. The package needs a Unix system with redis-server and mariadbd, mariadb-install-db
// (or mysqld, mysql_install_db) installed — or, for a run on PostgreSQL, initdb and postgres (on PATH or
// in /usr/lib/postgresql/<version>/bin).
//
// [RunDTM] is a second scenario, for the DTM integration end to end: the runnable example's order
// service (examples/order-pay-inventory in serve mode, built by the harness) under duplicate storms
// of saga and TCC orders, SIGKILLed mid-storm and restarted on its data — with an external DTM server
// on a private MariaDB and Redis, and on its embedded defaults (SQLite, in-process lock, a DTM child
// process whose store is in the data directory, killed and restarted with it). Every key is then
// retried until answered, and a checker verifies one order per key in every answer, money and stock
// conserved, every failed order's branches compensated in the barrier table, nothing PENDING.
//
// Run it with the command github.com/idemkit/idemkit/cmd/idemchaos (-dtm for the DTM scenario), in CI
// through this package's tests (go test ./internal/chaos/...), and as a soak with scripts/soak.sh.
package chaos
