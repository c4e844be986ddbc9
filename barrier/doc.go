// Package barrier is DTM's branch barrier: it makes each branch operation of a DTM saga, TCC, XA,
// workflow or message take effect at most once, in the right order, whatever the network does to the
// server's calls.
//
// A branch call carries trans_type, gid, branch_id and op in its query string ([FromRequest],
// [FromQuery], which read it exactly as dtmcli's BarrierFromQuery does, removing ';', CR and LF; a
// branch built directly with such characters is refused: see [NewBranch]). In the business's own local
// transaction the barrier inserts a row keyed by
// (gid, branch_id, op, barrier_id), and for a compensating op (cancel, compensate, rollback) first a row
// for the op it undoes (try, action, action), then decides:
//
//   - the current row already exists: a duplicate delivery (or, for try/action, a hanging request that
//     arrived after its compensation): the business does not run ([Duplicate], [Hanging]);
//   - a compensating op inserted its origin's row itself: the op it undoes never ran (null
//     compensation); the business does not run, and the row makes a late try/action hang
//     ([NullCompensation]);
//   - otherwise the business runs in the same transaction ([Proceed]); both commit or roll back together.
//
// Two backends:
//
//   - [Gorm] for business data in MySQL/MariaDB, PostgreSQL or SQLite, on a table with DTM's
//     dtm_barrier.barrier schema (DDL in the repository's sql/ directory, or [Gorm.CreateTable]). Rows
//     written by DTM's own dtmcli barrier and by this one honour each other. A table whose unique key's
//     columns compare loosely (one made from DTM's own MySQL DDL: case-insensitive VARCHAR) would let
//     two transactions' branches share rows: CreateTable refuses it ([Gorm.CheckKeyColumns]) with the
//     ALTER TABLE that fixes it. It runs inside the caller's
//     transaction and never commits or rolls it back ([Gorm.Call], usable inside db.Transaction), works
//     with gorm's PrepareStmt mode, and has a per-instance table name. [Gorm.Transaction] opens the
//     transaction itself. [Gorm.DeleteOlder] lets a sweeper delete old rows in bounded batches.
//   - [Redis] for business data in Redis (go-redis v9): one Lua script checks and sets the barrier keys
//     and runs the business's own Lua ([NewScript], or [AdjustAmount]) atomically. By default
//     ([LayoutTagged]) all keys share one hash tag so it runs on Redis Cluster, but dtmcli cannot read
//     them; [LayoutDTMCli] uses the keys of dtmcli's RedisCheckAdjustAmount instead, so a branch can move
//     between dtmcli and idemkit op by op. Barrier keys expire after a TTL instead of being swept.
//
// barrier_id counts the barrier calls made with one [Branch] ("01", "02", ...), as DTM does, so a handler
// may guard several local transactions with one branch. A Branch is therefore not safe for concurrent use;
// build one per request. Gorm and Redis values are safe for concurrent use.
package barrier
