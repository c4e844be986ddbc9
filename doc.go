// Package idemkit makes requests, message handlers and distributed-transaction branches idempotent:
// each business operation takes effect once, duplicates get the original result, and genuine failures
// may still be retried.
//
// A [Guard] puts three things in front of a function:
//
//   - a short per-key lock ([Locker], e.g. Redis) that turns concurrent duplicates away in one round trip
//     and answers finished keys from a result cache in the same round trip;
//   - a dedupe record in a database ([Store]) with a unique (scope, key) index and explicit states
//     PROCESSING → SUCCEEDED / FAILED / REJECTED; every write is conditioned on the record's fence and
//     owner, so a stalled holder can never overwrite the attempt that took over from it;
//   - an error classification: permanent errors (see [Permanent]) are stored and replayed like results,
//     retryable errors leave the record FAILED so the next attempt runs again.
//
// Correctness comes from the database record alone. The lock and the cache only save work; when they fail
// and [Options.FailOpen] is set the Guard carries on with the database.
//
// Three ways to run a function:
//
//   - [Guard.Do] (Execute mode): claim the record in its own commit, run, finish with a fenced update.
//   - [Guard.DoTx] (Tx mode): claim and finish inside the caller's own transaction, through a Store bound
//     to it, so the business writes and the record commit or roll back together.
//   - [Guard.Mark] (Mark mode): only mark the key done; duplicates are rejected with [ErrDuplicate],
//     nothing is replayed.
//   - [Guard.MarkTx]: Mark inside the caller's transaction — one INSERT beside the business writes.
//
// [Guard.Begin] is the primitive under them for work that does not fit one call, such as a global
// transaction whose outcome arrives later.
//
// The root package imports only the standard library. Backends live in their own packages: record (gorm:
// MySQL/MariaDB, PostgreSQL, SQLite), lock (Redis), memory (in-process Store and Locker for tests and
// embedded use), idemotel (OpenTelemetry).
package idemkit
