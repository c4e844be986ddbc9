// Package idemkit makes requests, message handlers and distributed-transaction branches idempotent:
// each business operation takes effect once, duplicates get the original result, and genuine failures
// may still be retried.
//
// A [Guard] puts three things in front of a function:
//
//   - a short per-key lock ([Locker], e.g. Redis) that turns concurrent duplicates away in one round trip
//     and answers finished keys from a result cache in the same round trip;
//   - a dedupe record in a database ([Store]) keyed by (scope, key), with explicit states
//     PROCESSING → SUCCEEDED / FAILED / REJECTED; every write is conditioned on the record's fence and
//     owner, so a stalled holder can never overwrite the attempt that took over from it;
//   - an error classification: permanent errors (see [Permanent]) are stored and replayed like results,
//     retryable errors leave the record FAILED so the next attempt runs again.
//
// Correctness comes from the database record alone. The lock and the cache only save work; when they fail
// and [Options.FailOpen] is set the Guard carries on with the database.
//
// Ways to run a function:
//
//   - [Guard.Tx] (Tx mode, recommended when the business writes to the record's database): the Guard
//     begins a transaction, runs the function in it, writes the record once beside its writes and
//     commits; record.Store.Tx is the gorm-typed form.
//   - [Guard.DoTx] (Tx mode in the caller's own transaction): the record is written once through a Store
//     bound to it; the caller must roll back on every error DoTx returns ([ErrRollbackReplayed]).
//   - [Guard.Do] (Execute mode): claim the record in its own commit, run, finish with a fenced update —
//     for work with effects outside the record's database.
//   - [Guard.Mark] (Mark mode): only mark the key done; duplicates are rejected with [ErrDuplicate],
//     nothing is replayed.
//   - [Guard.TxMark]: Mark in a transaction the Guard begins and commits — one INSERT before the
//     function's writes, committed with them; record.Store.TxMark is the gorm-typed form.
//   - [Guard.MarkTx]: the same inside the caller's own transaction.
//
// [Guard.Begin] is the primitive under them for work that does not fit one call, such as a global
// transaction whose outcome arrives later.
//
// The root package imports only the standard library. Backends live in their own packages: record (gorm:
// MySQL/MariaDB, PostgreSQL, SQLite), lock (Redis), memory (in-process Store and Locker for tests and
// embedded use), idemotel (OpenTelemetry).
package idemkit
