// Package dtmmsg publishes DTM 2-phase messages (DTM's "msg" mode) guarded by an idempotency record,
// beside packages saga and tcc.
//
// A 2-phase message ties a local transaction to a message: the message's branches are called (by DTM,
// until they succeed) if and only if the local transaction committed. [Publisher.Publish] does, for one
// client key:
//
//  1. claim the key's record PROCESSING with a fresh gid (hooks.Lifecycle.Begin): a duplicate gets the
//     stored result, or idemkit.ErrInFlight while the first publication runs, and publishes nothing;
//  2. prepare the message at DTM with the back-check URL (a prepare that could not connect to DTM
//     frees the key and returns an error matching txstatus.ErrNotSent);
//  3. run the local transaction on gorm: the barrier row of the message (barrier.MsgBranch), then the
//     user's writes, committed together;
//  4. submit the message; DTM calls its branches;
//  5. wait up to Publisher.Wait for DTM's outcome and commit the record (SUCCEEDED with the result),
//     roll it back (FAILED, or REJECTED for a permanent local failure) or leave it PROCESSING for the
//     [Reconciler].
//
// When the process dies between the local commit and the submit, DTM asks the back-check
// ([BackCheck], mounted at Publisher.QueryPrepared) after the message's timeout. The back-check is
// barrier.Gorm.QueryPrepared: it answers SUCCESS when the local transaction committed (DTM submits the
// message itself) and FAILURE otherwise, after writing a row that keeps a late local transaction from
// ever committing. So a message is published exactly when its local transaction committed, once per
// key while the record lives.
//
// The record of a publication whose initiator died stays PROCESSING with its gid; the [Reconciler]
// settles it: SUCCEEDED once DTM reports the message succeeded (a message DTM submitted committed its
// local transaction, whatever the barrier says by then); otherwise it runs the same back-check (fencing
// a local transaction that never committed) and marks the record FAILED when the local transaction did
// not commit.
package dtmmsg
