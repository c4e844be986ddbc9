// Package grpcx guards gRPC unary methods with an idemkit.Guard: a server interceptor that runs each
// call's handler at most once per idempotency key and answers duplicates from the record, and a client
// interceptor that attaches one key per logical call so retries reuse it.
//
// # Server
//
//	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(grpcx.UnaryServerInterceptor(guard, nil)))
//
// The key comes from the `idempotency-key` request metadata by default ([Options.Key]: [FieldKey] reads
// a request field, [FirstOf] combines sources); calls without one pass through unless
// [Options.Required] says the method needs one. The record scope is the full method name. The
// fingerprint is the SHA-256 of the method name and the request's deterministic proto encoding
// (proto.MarshalOptions{Deterministic: true}), a google.protobuf.Any in it by the deterministic
// encoding of the message it packs (when [Options.Resolver] knows its type: packed again for a
// retry, its bytes may differ), so the same request always matches itself and a different one under
// the same key is refused.
//
// A successful response is stored as a google.protobuf.Any (its type name and deterministic encoding)
// and replayed by decoding it into a new message of that type (found in [Options.Resolver], the global
// registry by default). Served with [Codec] the replay is byte for byte the original answer, maps
// included; with gRPC's default codec it differs at most in the order of map entries.
//
// The header and trailer metadata a guarded handler sets (grpc.SetHeader, grpc.SendHeader,
// grpc.SetTrailer) are stored with its response or permanent status and replayed with it. They go
// out only with the handler's own answer: a guarded handler's context holds a stream of the
// interceptor's that keeps them until then, so a Tx-mode call answered from the record after its
// handler ran (its writes rolled back) sends the stored metadata, not its handler's. gRPC's
// experimental grpc.SetSendCompressor and grpc.ClientSupportedCompressors need gRPC's own stream and
// fail in a guarded handler. Interceptors chained after this one count as the handler: chain those
// that set per-call metadata (a trace id) before it.
//
// # Status codes
//
//	situation                                             answer
//	first call                                            the handler's answer
//	duplicate of a finished call                          the stored response, or the stored status
//	                                                        (code, message and details), with the
//	                                                        header and trailer the handler set and
//	                                                        response header idempotent-replayed: true
//	same key in flight                                    ABORTED + google.rpc.RetryInfo (retry delay:
//	                                                        the holder's remaining lock or lease, at
//	                                                        most Options.InFlightRetryDelay (1s), at
//	                                                        least 50ms), the same delay in the trailer
//	                                                        grpc-retry-pushback-ms, which gRPC's
//	                                                        retry policy honours
//	same key, different request (or another method       FAILED_PRECONDITION + google.rpc.PreconditionFailure
//	  sharing its Scope)                                    (type IDEMPOTENCY_KEY_REUSED)
//	key missing on a Required method, malformed, too      INVALID_ARGUMENT
//	  long, empty, or two different keys in the metadata
//	Options.Principal returned an error                   PERMISSION_DENIED, or the code of the status
//	                                                        error it returned (the handler does not run)
//	record store or lock unavailable                      UNAVAILABLE (nothing ran)
//	the Guard's watchdog cancelled the handler (MaxHold   UNAVAILABLE (not stored: a retry runs again),
//	  ran out, the lock was lost)                           without the handler's header and trailer
//	Tx mode: the transaction could not begin or commit,   UNAVAILABLE (nothing took effect)
//	  or the record could not be written after the
//	  handler (its writes rolled back)
//	Execute mode: the handler's response cannot be        UNKNOWN (the key stored REJECTED without it: its
//	  encoded for the record (a string field not UTF-8,     effects happened, it never runs again, and
//	  a response that is not a proto message)               every retry is answered the same)
//	Execute mode: the handler's response too large for    the handler's answer; the key stored REJECTED
//	  the record                                            without it: every retry is answered UNKNOWN
//	Tx mode: the handler's response too large for the     UNKNOWN (its writes rolled back, the key stored
//	  record                                                REJECTED without it: every retry the same)
//	Tx mode: the handler's response cannot be encoded     UNKNOWN (INTERNAL when not a proto message):
//	  for the record                                        its writes rolled back, nothing stored, the
//	                                                        next call with the key runs again
//	the caller's deadline or cancellation while claiming  DEADLINE_EXCEEDED / CANCELLED
//
// A handler's error is classified by [Options.Permanent] ([DefaultPermanent]): INVALID_ARGUMENT,
// NOT_FOUND, ALREADY_EXISTS, PERMISSION_DENIED, FAILED_PRECONDITION, OUT_OF_RANGE and UNIMPLEMENTED
// are permanent: stored (REJECTED) and replayed exactly. Every other code (UNAVAILABLE, INTERNAL,
// DEADLINE_EXCEEDED, ABORTED, RESOURCE_EXHAUSTED, CANCELLED, UNKNOWN, DATA_LOSS, UNAUTHENTICATED) is
// retryable: the claim is released (FAILED) and the next call with the key runs again. An error the
// handler marks with idemkit.Permanent is permanent, and one it marks with idemkit.Retryable
// retryable, whatever its code.
//
// Why FAILED_PRECONDITION for a reused key: gRPC's code guide reserves INVALID_ARGUMENT for requests
// that are wrong "regardless of the state of the system", and FAILED_PRECONDITION for those refused
// because of the system's state. A key reused with another request is a valid request on its own: it
// is refused only because the key already belongs to a different one (state kept by the server), and
// it must not be retried as is. Both codes are non-retryable for gRPC clients; the
// PreconditionFailure detail names the violation for programs. (The HTTP middleware answers 422.)
//
// # DTM
//
// These codes are not DTM's, and grpcx has no DTM mode (package httpx's Options.DTM has no gRPC
// counterpart): DTM reads a gRPC branch's ABORTED as FAILURE and its FAILED_PRECONDITION as ONGOING,
// so behind this interceptor a DTM branch answered in flight would be rolled back while it still
// runs, and one whose key is reused with another request retried for ever — guard a DTM gRPC branch
// with package barrier instead (barrier.NewBranch from the TransType, Gid, BranchID and Op of
// dtmgrpc.BarrierFromGrpc(ctx), the business run in the barrier's Call), answering codes.Aborted for
// its failure and codes.FailedPrecondition for "ongoing", as dtmgrpc.DtmError2GrpcError does.
//
// # Modes
//
// By default a call runs in Execute mode (Guard.Do): the claim and the finish are written in their own
// statements around the handler, whatever the handler writes to. With [Options.Tx] set (an
// idemkit.TxBeginner such as the *record.Store of the business database), it runs in Tx mode
// ([idemkit.Guard.Tx]): the Guard begins a local transaction, the handler makes its writes in it
// (found with [TxFromContext]; record.GormTx turns it into the *gorm.DB), then the record is written
// once with the final answer beside those writes, and everything commits together. A duplicate of a
// finished call is answered before the handler runs; a concurrent attempt that finished the key while
// the handler ran (found by the record's INSERT) makes the Guard roll the handler's writes back, and
// the call gets the stored answer, byte for byte, marked replayed. Any failure rolls the handler's
// writes back: a retryable one stores nothing, a permanent one is stored REJECTED by the Guard on its
// own. Only Tx mode survives a crash between the handler's commit and the finish with exactly one
// effect; Execute mode then runs the handler again after the lease (at-least-once for effects outside
// the record's database).
//
// # Client
//
//	cc, err := grpc.NewClient(target, grpc.WithChainUnaryInterceptor(grpcx.UnaryClientInterceptor(nil)), ...)
//
// [UnaryClientInterceptor] adds a fresh key to every call that has none. It runs once per logical
// call, above gRPC's retries (retry policy, transparent retries), so every attempt carries the same
// key. A retry interceptor of the application's (go-grpc-middleware's retry) goes after it in the
// chain, inside it: chained before, it calls the key interceptor once per attempt, and every attempt
// gets a key of its own. An application's own retry loop keeps one key by deriving its context once
// with [WithNewKey] (or [WithKey] with a key of its choosing) before the loop.
package grpcx
