// Package crashpoint holds TestCrashPoints: for each mode (Do, Mark, Tx, TxMark, DoTx, httpx) and
// each deterministic crash point of a call (inside the function before and after the business
// commit, before and after the claim, the finish, the takeover and the cache fill), a child process
// runs one guarded call on MariaDB and a private Redis and SIGKILLs itself there; the test then
// retries the key from its own process, with the same payload and another, plain, with the Watchdog,
// with FailOpen and Redis gone, with Redis restarted empty, after the sweeper's recover_stale, and
// checks what the README promises: nothing left PROCESSING, every Redis key with an expiry, a key
// in flight only until the dead holder's lease or lock runs out, another payload never run while
// the key is held, at most one effect in the Tx modes, a finished key never run again, and the
// stored answer replayed. CP_MULTI=1 runs it on a multiStatements pool, CP_PG=1 on PostgreSQL,
// CP_ONLY=<substring> one case.
package crashpoint
