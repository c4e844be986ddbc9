// Package tcc runs DTM TCC global transactions whose idempotency record follows the global outcome,
// and guards try/confirm/cancel branches with the branch barrier.
//
// The initiator side is [Global]: [Global.Run] claims the client's key (a duplicate gets the stored
// result, or idemkit.ErrInFlight while the first transaction runs, and starts nothing), prepares the
// transaction with a fresh gid stored on the record, calls the tries, submits (or aborts when a try
// failed, so DTM cancels the tried branches), waits up to Global.Wait for the outcome and marks the
// record SUCCEEDED or FAILED; when the outcome is not known in time a hooks.Reconciler settles it.
//
// The branch side is [Try], [Confirm] and [Cancel]: http.Handlers that run the business behind the
// branch barrier in one local transaction (dtmhttp.Gorm, dtmhttp.Redis) and answer with the codes DTM
// reads (package dtmhttp documents them). The barrier makes confirm and cancel idempotent, skips a
// cancel whose try never ran (empty cancel) and a try that arrives after its cancel (hanging). Only a
// try may fail permanently (409, the initiator aborts); confirm and cancel must succeed eventually.
package tcc
