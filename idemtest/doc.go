// Package idemtest holds conformance suites for [idemkit.Store] and [idemkit.Locker] implementations.
// Every backend in this module runs them, and third-party backends should too:
//
//	func TestConformance(t *testing.T) {
//		idemtest.RunStore(t, func(t *testing.T) idemkit.Store { return newStoreOnFreshTable(t) })
//		idemtest.RunLocker(t, func(t *testing.T) idemkit.Locker { return newLockerWithFreshPrefix(t) })
//	}
//
// The Store suite checks the Store contract (insert-first uniqueness, compare-and-swap updates and
// deletes, keys compared byte for byte, round-tripping every field, keeping and handing out copies,
// keeping records past their expiry by the real clock, concurrency) and then drives a Guard over the
// Store through every row of the state table: new key, replay, permanent and retryable failures,
// in-flight, lease takeover, fencing of a stale holder, expiry, payload mismatch, Mark mode, panics,
// and concurrent duplicates. When the Store also has the sweeper hooks (DeleteExpired, RecoverStale,
// and RecoverStaleClaims of sweep.ClaimRecoverer) the suite checks them; when it begins transactions
// ([idemkit.TxBeginner]) it checks the contract inside a transaction too (a write over a version that
// moved on since it was read is refused, Rollback discards, Commit applies, Peek reads no other
// transaction's uncommitted writes) and drives [idemkit.Guard.Tx] through the state table.
package idemtest
