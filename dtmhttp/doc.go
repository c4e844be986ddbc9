// Package dtmhttp answers DTM's HTTP branch calls: the saga action and compensate, TCC try, confirm and
// cancel (and XA/workflow commit and rollback) requests a DTM server or client sends to a service. It
// is the one handler under the step handlers of packages saga and tcc.
//
// A handler built by [Branches.Handle]:
//
//  1. reads the branch from the query string (trans_type, gid, branch_id, op; [barrier.FromRequest]) and
//     the payload from the body (at most [Options.MaxBody] bytes);
//  2. takes a short lock on (gid, branch_id, op) with a fresh token per delivery when
//     [Options.Locker] is set, so a concurrent redelivery of the same branch operation is answered
//     425 at once instead of queueing on the barrier row in the database;
//  3. runs the [Business] — typically [Gorm] or [Redis], which run the user's function behind the
//     branch barrier in one local transaction (or one Lua script) — and
//  4. answers with the status code and body DTM reads.
//
// # Answers
//
//	situation                                              status  body
//	success, or the barrier skipped a repeated, hanging    200     {"dtm_result":"SUCCESS"}
//	  or null-compensation delivery
//	in flight: the lock is held by another delivery, or    425     {"dtm_result":"ONGOING","message":...}
//	  the business returned idemkit.ErrInFlight or                 (+ Retry-After for the lock)
//	  dtmcli.ErrOngoing
//	permanent business failure (idemkit.Permanent, or      409     {"dtm_result":"FAILURE","message":...}
//	  dtmcli.ErrFailure) of a saga/workflow/XA action
//	  or a TCC try
//	malformed or oversized payload of such an op           409     as above
//	permanent failure of any other op (see below)          500     {"message":...}
//	infrastructure error (database, Redis, lock)           500     {"message":...}
//	panic in the business                                  500     {"message":"..."}, then the panic goes on
//	no branch in the query (a field missing), or an op     400     {"message":...}
//	  the handler does not serve
//	a branch the barrier cannot store (a gid over 128      409 / 200 / 400, by op: see below
//	  characters, ...: barrier.ErrInvalidBranch)
//
// Errors are matched with errors.Is, so wrapped ones count: a business written for dtmcli that returns
// fmt.Errorf("...: %w", dtmcli.ErrFailure) or dtmcli.ErrOngoing is answered as dtmcli.Result2HttpJSON
// would answer it (409, 425), FAILURE taking precedence. An error is never classified by its text.
//
// DTM reads them so: 200 is success; 409 (or a body containing FAILURE) fails a saga action, which rolls
// the saga back, or a TCC try, which makes the initiator abort; 425 (or a body containing ONGOING) means
// "ask again later" at the transaction's retry interval; anything else is retried with exponential
// backoff. Because DTM searches the body for those words, messages are written with FAILURE and ONGOING
// in lower case.
//
// # Ops that must not fail
//
// A compensate, cancel, confirm, commit or rollback — and the action of a msg transaction — has no
// failure path in DTM: whatever it answers except 200 (or 425), DTM retries it until it succeeds, for as
// long as the transaction lives. Such a business must succeed eventually; a permanent error there is a
// bug. When one returns an error marked permanent anyway, the handler answers 500 (not 409: there is no
// rollback to trigger), logs it at error level on [Options.Logger] and reports it to [Options.Observe];
// DTM keeps retrying with backoff until the business is fixed. A malformed payload of such an op is
// handled the same way once the barrier lets the call through (see "Malformed payloads").
//
// # Branches the barrier cannot store
//
// DTM v1.19 takes a gid longer than the barrier table's 128 characters from an initiator that does
// not check it (dtmcli, a client in another language; saga and tcc choose valid gids) on its default
// store, boltdb, and calls every branch with it; barrier.NewBranch refuses such a branch (also one
// whose branch_id is too long, or whose fields are not valid UTF-8), before the lock, the payload or
// the business. DTM sends the same fields on every call, so every call of the branch is refused
// alike, and the answer depends on the op. An op that may fail answers 409 FAILURE, with nothing
// run: the saga rolls back, the TCC aborts. A compensate, cancel or rollback answers 200: the op it
// undoes was refused the same way and has nothing to undo — the barrier's own decision for a
// compensation whose op left no row in its table. A confirm, a commit or the action of a msg
// transaction must take effect and cannot, nor fail: it answers 400 and is logged at error level,
// and DTM retries it until an operator steps in (only an initiator that got a refused try's 409 and
// did not abort, or a branch served elsewhere, leads there). Every one of these answers is logged, at
// warning level at least.
//
// # Malformed payloads
//
// DTM stores a branch's payload when the transaction is submitted (or the branch registered) and sends
// the same bytes on every retry: a payload that cannot be decoded, or is larger than MaxBody, never gets
// better. For an op that may fail, the handler therefore answers 409 (the saga rolls back, the TCC
// aborts) rather than a 4xx DTM would retry forever. [Decode] wraps such errors as
// idemkit.Permanent([ErrMalformedPayload]). An empty body (DTM sends GET without a body when the
// payload is empty) decodes to T's zero value.
//
// The compensation of such an action (or the cancel of such a try) carries the same payload, and has
// nothing to undo: [Gorm] and [Redis] let the barrier decide before they read the payload, so they
// answer the null compensation 200 without it, whether it is malformed or larger than MaxBody, and
// refuse the payload (500, retried, as above) only when the barrier lets the call through: the op it
// undoes did run, or there is none (a confirm). [Redis]'s barrier keys then hash on the gid, since the
// keys the payload would name are unknown (see [Redis]). A Business written by hand (which gets no
// Request.Branch for an oversized payload) refuses an oversized payload of an op that must not fail
// before its barrier decides.
//
// # Panics
//
// A panic in the business rolls its local transaction back (the barrier rows go with it), releases
// the lock, answers 500 with a Content-Length and "Connection: close" and flushes it, and then
// continues, unrecovered, so the server's recoverer (or net/http's, which logs it and closes the
// connection) sees the original panic and its stack. DTM gets a complete 500 either way and retries.
// A recoverer that writes its own 500 afterwards (chi's middleware.Recoverer) changes nothing: the
// answer has been sent.
//
// # Guarantees and limits
//
// The barrier makes each op take effect at most once and in order (no action after its compensation,
// nothing to undo for a compensation whose action never ran); the lock is only an efficiency device and
// correctness never depends on it: without a Locker, or when it fails open, a concurrent redelivery
// waits on the barrier's unique row and then sees a duplicate. A lock left by a crashed process delays
// redeliveries of that op by at most [Options.LockTTL] (they are answered 425 meanwhile).
//
// The business of an op that may fail (a saga's action, a TCC's try) runs on the request's context:
// when its caller gives up on a slow call (DTM's request timeout, 3 s by default) the local
// transaction is cancelled and rolled back, and the next delivery runs it again. That loses nothing:
// DTM takes an action it gave up on for one that may have run. It delivers it again, or, when the
// saga rolls back meanwhile, compensates it — before compensating, DTM marks every action that was
// started or could start as done (v1.19's prepareToCompensate), as a TCC's rollback cancels every
// registered try — and the barrier makes the compensation of an action that did not commit a null
// compensation (and a delivery of the action arriving after it hanging). Keep such a business well
// under the caller's timeout (or raise the timeout: dtmcli's RequestTimeout): one slower is rolled
// back on every delivery and never completes. The business of an op that must not fail (compensate, confirm, cancel, and the
// others above) is not cancelled with the request: when DTM gives up on the call it goes on and
// commits, as with dtmcli's barrier, and DTM's next delivery finds it done; it is cancelled only once
// [Options.LockTTL] passed since the call arrived, so keep LockTTL above its longest run. (Cancelled
// with the request, one slower than DTM's timeout would roll back and run again on every delivery,
// never finishing.)
package dtmhttp
