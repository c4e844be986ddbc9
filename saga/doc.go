// Package saga runs DTM sagas whose idempotency record follows the global outcome, and guards saga
// steps with the branch barrier.
//
// The initiator side is [Initiator]: [Initiator.Submit] claims the client's key (a duplicate gets the
// stored result, or idemkit.ErrInFlight while the first saga runs, and submits nothing), submits the
// saga with a fresh gid stored on the record, waits up to Initiator.Wait for the outcome from DTM's query
// API and marks the record SUCCEEDED (with the result) or FAILED (a retry with the same key submits a new
// saga); when the outcome is not known in time the record stays PROCESSING for a hooks.Reconciler.
//
// The step side is [Action] and [Compensate]: http.Handlers that run the step's business behind the
// branch barrier in one local transaction (dtmhttp.Gorm, dtmhttp.Redis) and answer with the codes DTM
// reads (package dtmhttp documents them). An action may fail permanently (idemkit.Permanent → 409), which
// rolls the saga back; a compensation must not: DTM retries it until it succeeds.
package saga
