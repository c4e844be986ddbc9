package grpcx

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strconv"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/idemkit/idemkit"
)

// minRetryDelay is the smallest retry hint sent with ABORTED, so a client honouring it does not spin.
const minRetryDelay = 50 * time.Millisecond

// UnaryServerInterceptor returns the interceptor of [NewUnaryServerInterceptor]. It panics where that
// returns an error (guard nil, an invalid option): a programming error, found when the server is built.
func UnaryServerInterceptor(guard *idemkit.Guard, opts *Options) grpc.UnaryServerInterceptor {
	i, err := NewUnaryServerInterceptor(guard, opts)
	if err != nil {
		panic(err)
	}
	return i
}

// NewUnaryServerInterceptor returns a unary server interceptor that runs each guarded call's handler
// at most once per idempotency key and answers duplicates from the record (see the package
// documentation for the status codes). opts may be nil. It returns an error when guard is nil, its
// MaxKeyLen is below 71 (the length of the hashed form long scopes and keys are kept in), or an
// option is invalid (a negative InFlightRetryDelay). The interceptor is safe for concurrent use.
func NewUnaryServerInterceptor(guard *idemkit.Guard, opts *Options) (grpc.UnaryServerInterceptor, error) {
	if guard == nil {
		return nil, errNoGuard
	}
	// Long scopes, principal keys and FieldKey keys are kept as their hashed form: a Guard that
	// refuses one would answer such calls INTERNAL for the life of the server.
	if gmax, hashed := guard.MaxKeyLen(), len(idemkit.HashedForm("")); gmax < hashed {
		return nil, fmt.Errorf("grpcx: the Guard's MaxKeyLen %d is below %d, the length of the hashed keys and scopes the interceptor keeps", gmax, hashed)
	}
	if opts != nil && opts.InFlightRetryDelay < 0 {
		return nil, fmt.Errorf("grpcx: InFlightRetryDelay must not be negative, got %s", opts.InFlightRetryDelay)
	}
	s := &server{g: guard, c: opts.withDefaults()}
	return s.intercept, nil
}

type server struct {
	g    *idemkit.Guard
	c    config
	anys anyTypes // request types that can hold a google.protobuf.Any
}

// call is the state of one guarded call.
type call struct {
	ran  bool      // the handler ran
	resp any       // its response
	herr error     // its error
	ferr error     // the error returned to the Guard (herr, marked permanent or not, or an encoding error)
	lost error     // the Guard's watchdog cancelled the handler (idemkit.ErrLockLost) and herr is that context error
	md   *answerMD // the header and trailer the handler set, sent only with its own answer (nil outside a gRPC server)
}

// err is the handler's error as the caller gets it. A context error the Guard caused — its watchdog
// cancelled the handler (MaxHold ran out, the lock was lost) while the caller waited — is
// UNAVAILABLE, as an unavailable lock is: nothing was stored and a retry runs again, where
// CANCELLED would tell the caller that it cancelled the call itself.
func (st *call) err() error {
	if st.lost != nil {
		return status.Error(codes.Unavailable, st.lost.Error())
	}
	return unmarked(st.herr)
}

// flushOwn sends the header and trailer the handler set, with its own answer: not when the Guard's
// watchdog cancelled it (st.lost), whose UNAVAILABLE says nothing was done and to retry — metadata
// set for the answer the handler meant to give would contradict it (as httpx's 503 in that case
// carries none of the handler's header fields).
func (st *call) flushOwn() {
	if st.lost == nil {
		st.md.flush()
	}
}

// unmarked is err without the idemkit.Permanent and idemkit.Retryable marks around it. They add no
// text, but gRPC answers a wrapped status with the wrapper's whole text for its message ("rpc error:
// code = Internal desc = card declined"): unmarked, the status goes out as the handler made it.
func unmarked(err error) error {
	for {
		switch e := err.(type) {
		case *idemkit.PermanentError:
			err = e.Err
		case *idemkit.RetryableError:
			err = e.Err
		default:
			return err
		}
	}
}

func (s *server) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	method := info.FullMethod
	if !s.c.guarded(method) {
		return handler(ctx, req)
	}
	msg, _ := req.(proto.Message) // nil for a service served with another codec: its key is in metadata, if any
	key, err := s.c.key(ctx, method, msg)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if key == "" {
		if s.c.required(method) {
			if s.c.metadataKey {
				return nil, status.Errorf(codes.InvalidArgument, "grpcx: %s requires an idempotency key (metadata %q)", method, MetadataKey)
			}
			// Not where Options.Key reads it (a request field): a client told so would send it in vain.
			return nil, status.Errorf(codes.InvalidArgument, "grpcx: %s requires an idempotency key", method)
		}
		return handler(ctx, req)
	}
	if msg == nil {
		// No proto encoding to fingerprint, nor to store the response in.
		return nil, status.Errorf(codes.Internal, "grpcx: %s: request %T is not a proto message", method, req)
	}
	if s.c.principal != nil {
		if key, err = s.principalKey(ctx, key); err != nil {
			return nil, err
		}
	}
	fp, err := fingerprint(method, msg, s.c.resolver, &s.anys)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	scope, err := s.scope(method)
	if err != nil {
		s.c.logger.ErrorContext(ctx, "grpcx: no usable scope", slog.String("method", method), slog.Any("error", err))
		return nil, status.Error(codes.Internal, err.Error())
	}
	c := idemkit.Call{Scope: scope, Key: key, Fingerprint: fp}

	stream := grpc.ServerTransportStreamFromContext(ctx)
	var st call
	run := func(ctx context.Context) ([]byte, error) {
		st = call{ran: true}
		if stream != nil {
			st.md = &answerMD{ServerTransportStream: stream}
			ctx = grpc.NewContextWithServerTransportStream(ctx, st.md)
		}
		st.resp, st.herr = handler(ctx, req)
		if cause := context.Cause(ctx); st.herr != nil && errors.Is(cause, idemkit.ErrLockLost) && !idemkit.IsPermanent(st.herr) {
			if c := statusOf(st.herr).Code(); c == codes.Canceled || c == codes.DeadlineExceeded {
				st.lost = cause
			}
		}
		var val []byte
		val, st.ferr = s.outcome(ctx, st.resp, st.herr)
		if len(val) > 0 { // stored: a response or a permanent status, with the handler's metadata
			header, trailer, _ := st.md.kept()
			val = appendMD(val, header, trailer)
		}
		return val, st.ferr
	}
	if s.c.tx == nil {
		res, err := s.g.Do(ctx, c, run)
		if !st.ran {
			return s.answer(ctx, res, err)
		}
		switch {
		case sameError(err, st.ferr):
		case storedRejected(err):
			// Its response does not fit the record (too large): the key is recorded REJECTED without
			// it, as the handler's effects happened, and its retries are answered UNKNOWN. This call
			// still gets the handler's answer, the truth about it.
			s.c.logger.WarnContext(ctx, "grpcx: response not stored, the key is recorded REJECTED without it: its retries are answered UNKNOWN",
				slog.String("method", method), slog.Any("error", err))
		default:
			// The handler's effects happened but its outcome could not be recorded (a store error,
			// or a newer attempt took the key over): its answer is still the truth about this call.
			s.c.logger.WarnContext(ctx, "grpcx: outcome not recorded", slog.String("method", method), slog.Any("error", err))
		}
		if st.herr == nil && st.ferr != nil {
			// Its response cannot be stored (nor sent: gRPC's codec refuses it too), and the key is
			// recorded REJECTED without it: this call is answered as its retries are.
			return nil, status.Error(codes.Unknown, err.Error())
		}
		st.flushOwn()
		return st.resp, st.err()
	}

	res, err := s.g.Tx(ctx, s.c.tx, c, func(ctx context.Context, tx idemkit.TxStore) ([]byte, error) {
		return run(context.WithValue(ctx, txKey{}, tx))
	})
	return s.txAnswer(ctx, method, &st, res, err)
}

// storedRejected reports whether err says the call's outcome did not fit the record (a response too
// large for it) and the key was recorded REJECTED without it instead: not when that REJECTED record
// could not be written either (joined with the write's error), nor for an answer about another attempt.
func storedRejected(err error) bool {
	return errors.Is(err, idemkit.ErrUnstorable) && !errors.Is(err, idemkit.ErrStoreUnavailable) &&
		!errors.Is(err, idemkit.ErrInFlight) && !errors.Is(err, idemkit.ErrPayloadMismatch)
}

// principalKey is the key stored for the client's key of a call under Options.Principal: the client's
// key is checked as the Guard would check it, then scoped by the caller (idemkit.PrincipalKey), hashed
// when the caller's prefix takes it past the Guard's limit.
func (s *server) principalKey(ctx context.Context, key string) (string, error) {
	if err := idemkit.ValidateKey(key, s.g.MaxKeyLen()); err != nil {
		return "", status.Error(codes.InvalidArgument, err.Error())
	}
	principal, err := s.c.principal(ctx)
	if err != nil {
		if st, ok := status.FromError(err); ok {
			return "", st.Err()
		}
		return "", status.Error(codes.PermissionDenied, err.Error())
	}
	key = idemkit.PrincipalKey(principal, key)
	if len(key) > s.g.MaxKeyLen() {
		key = idemkit.HashedForm(key)
	}
	return key, nil
}

// scope is the record scope of method: Options.Scope's (the full method name by default), kept as its
// hash (idemkit.HashedForm) when the Guard would refuse it — a method name longer than the Guard's
// MaxKeyLen — as the HTTP middleware keeps its scopes. The scope is the server's choice: one the Guard
// cannot take even so (empty; a MaxKeyLen below the hash's length is refused when the interceptor is
// built) is an error of the server's, never the client's INVALID_ARGUMENT.
func (s *server) scope(method string) (string, error) {
	scope := s.c.scope(method)
	if scope == "" {
		return "", fmt.Errorf("grpcx: Options.Scope returned an empty scope for %s", method)
	}
	if idemkit.ValidateKey(scope, s.g.MaxKeyLen()) != nil {
		scope = idemkit.HashedForm(scope)
	}
	if err := idemkit.ValidateKey(scope, s.g.MaxKeyLen()); err != nil {
		return "", fmt.Errorf("grpcx: the scope of %s: %w", method, err)
	}
	return scope, nil
}

// txAnswer answers a call guarded in Tx mode ([idemkit.Guard.Tx]). The Guard commits the handler's
// writes only together with the record of its success, so the handler's own answer is given only
// when it is the recorded outcome (or a retryable failure, which records nothing); in every other
// case the handler's writes were rolled back and the answer is the record's, or the reason nothing
// was recorded. The header and trailer the handler set go out only with its own answer.
func (s *server) txAnswer(ctx context.Context, method string, st *call, res idemkit.Result, err error) (any, error) {
	switch {
	case !st.ran || res.Replayed:
		// Answered from the record: before the handler ran, or after it, its writes rolled back,
		// because another attempt had finished the key meanwhile (found by the record's INSERT).
		return s.answer(ctx, res, err)
	case err == nil:
		st.md.flush()
		return st.resp, nil // committed with its record
	case sameError(err, st.ferr):
		// The handler's failure, its writes rolled back: stored REJECTED when permanent (the Guard
		// wrote it on its own), nothing stored when retryable.
		if st.herr == nil {
			return nil, statusOf(err).Err() // the response could not be encoded for storage
		}
		st.flushOwn()
		return nil, st.err()
	case storedRejected(err):
		// Its outcome does not fit the record (a response too large): the writes were rolled back
		// and the key stored REJECTED without it, which its retries are answered (UNKNOWN, as a
		// rejection without a stored status): so is this call, rather than with a code saying to retry.
		// Not when that REJECTED record could not be written either (joined with the write's error):
		// nothing is stored, and the answer is the write's, as below.
		return nil, status.Error(codes.Unknown, err.Error())
	}
	// The handler ran but its outcome was not recorded, and its writes were rolled back: the commit
	// or the record's write failed, or the key turned out in flight or taken by another request.
	s.c.logger.WarnContext(ctx, "grpcx: Tx mode: outcome not recorded, the handler's writes rolled back",
		slog.String("method", method), slog.Any("error", err))
	return s.answer(ctx, idemkit.Result{}, err)
}

// txKey is the context key of the Tx-mode transaction ([TxFromContext]).
type txKey struct{}

// TxFromContext returns the transaction a call guarded in Tx mode ([Options.Tx]) runs in, from the
// handler's context: the idemkit.TxStore the Guard began on Options.Tx, in which the handler makes
// its writes so that they commit with the call's record. With a record.Store as Options.Tx,
// record.GormTx(grpcx.TxFromContext(ctx)) is the *gorm.DB to write through. The handler must not
// commit or roll it back: the Guard does. It returns nil outside Tx mode.
func TxFromContext(ctx context.Context) idemkit.TxStore {
	tx, _ := ctx.Value(txKey{}).(idemkit.TxStore)
	return tx
}

// sameError reports whether a and b are the same error value. Unlike a == b it does not panic when
// both hold the same uncomparable type (a struct with a slice, say); such values are told apart by
// their text.
func sameError(a, b error) bool {
	if a == nil || b == nil {
		return a == b
	}
	t := reflect.TypeOf(a)
	if t != reflect.TypeOf(b) {
		return false
	}
	if t.Comparable() {
		return a == b
	}
	return a.Error() == b.Error()
}

// statusOf is the status gRPC's server answers for a handler's error (unmarked): the error's own
// status, else a context error's code (DEADLINE_EXCEEDED, CANCELED) when it wraps one, else UNKNOWN.
// What is stored for a permanent error is this status, so a duplicate gets the code the first call got.
func statusOf(err error) *status.Status {
	err = unmarked(err)
	if st, ok := status.FromError(err); ok {
		return st
	}
	return status.FromContextError(err)
}

// outcome turns the handler's answer into what the Guard stores: the encoded response on success,
// the encoded status with a permanent error, or a retryable error (stored as FAILED, not replayed).
// The context error of a handler whose context ended (its caller left, the watchdog cancelled it) is
// no business answer: it is marked idemkit.Retryable, whatever the Guard's classifier says. So is a
// response that cannot be encoded for the record in Tx mode (its writes roll back); in Execute mode
// its effects happened, and it is marked idemkit.Permanent (see unstorable).
func (s *server) outcome(ctx context.Context, resp any, herr error) ([]byte, error) {
	if herr != nil {
		st := statusOf(herr)
		if ctx.Err() != nil && !idemkit.IsPermanent(herr) && (st.Code() == codes.Canceled || st.Code() == codes.DeadlineExceeded) {
			return nil, idemkit.Retryable(herr)
		}
		// The Guard's own classifier (its Options.IsPermanent) and this package's (Options.Permanent)
		// both decide: an error either calls permanent is stored, encoded, and marked so the Guard
		// stores it REJECTED whatever its classifier says of the status error. Like the Guard's,
		// Options.Permanent yields to an idemkit.Retryable mark: the handler said to run it again.
		if s.g.IsPermanent(herr) || !idemkit.IsRetryable(herr) && s.c.permanent(st) {
			b, err := encodeStatus(st)
			if err != nil {
				// Details that cannot be encoded: the code and message still are the answer.
				b, err = encodeStatus(status.New(st.Code(), st.Message()))
			}
			if err != nil {
				return nil, herr
			}
			return b, idemkit.Permanent(herr)
		}
		return nil, herr
	}
	m, ok := resp.(proto.Message)
	if !ok {
		return nil, s.unstorable(status.Errorf(codes.Internal, "grpcx: response %T is not a proto message", resp))
	}
	b, err := encodeResponse(m)
	if err != nil {
		return nil, s.unstorable(err)
	}
	return b, nil
}

// unstorable is the error stored for a handler that succeeded with a response that cannot be encoded
// for the record (err says why). In Tx mode it is retryable: the handler's writes roll back, nothing
// took effect, and the next call with the key runs again. In Execute mode the handler's effects
// happened: it is permanent, so the key is recorded REJECTED without a response and never runs
// again, as the Guard records a result its Store cannot hold (idemkit.ErrUnstorable); its duplicates
// get UNKNOWN, a rejection without a stored status.
func (s *server) unstorable(err error) error {
	if s.c.tx != nil {
		return idemkit.Retryable(err)
	}
	return idemkit.Permanent(fmt.Errorf("grpcx: the handler ran, but its response cannot be stored: %w", err))
}

// answer answers a call whose handler did not run (or whose handler's answer is not the call's): a
// replay, with the header and trailer stored with it, or a refusal.
func (s *server) answer(ctx context.Context, res idemkit.Result, err error) (any, error) {
	if res.Replayed {
		value, header, trailer, derr := splitMD(res.Value)
		if derr != nil {
			value = res.Value // not ours to read: decoding it below says so
		}
		_ = grpc.SetHeader(ctx, metadata.Join(header, metadata.Pairs(ReplayedKey, "true")))
		_ = grpc.SetTrailer(ctx, trailer)
		if err != nil {
			st, derr := decodeStatus(value)
			if derr != nil || len(value) == 0 {
				return nil, status.Error(codes.Unknown, err.Error())
			}
			return nil, st.Err()
		}
		m, derr := decodeResponse(value, s.c.resolver)
		if derr != nil {
			return nil, status.Error(codes.Internal, derr.Error())
		}
		return m, nil
	}
	var inflight *idemkit.InFlightError
	switch {
	case errors.As(err, &inflight):
		return nil, inFlight(ctx, err, max(min(inflight.RetryAfter, s.c.retryMax), minRetryDelay))
	case errors.Is(err, idemkit.ErrInFlight):
		return nil, inFlight(ctx, err, minRetryDelay)
	case errors.Is(err, idemkit.ErrPayloadMismatch):
		return nil, withDetail(codes.FailedPrecondition, err.Error(), &errdetails.PreconditionFailure{
			Violations: []*errdetails.PreconditionFailure_Violation{{
				Type:        "IDEMPOTENCY_KEY_REUSED",
				Subject:     MetadataKey,
				Description: "the idempotency key was first used with a different request; use a new key for a new request",
			}},
		})
	case errors.Is(err, idemkit.ErrInvalidKey):
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	return nil, s.storeStatus(err)
}

// storeStatus maps the Guard's infrastructure errors: context errors as such, the rest UNAVAILABLE.
func (s *server) storeStatus(err error) error {
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return status.FromContextError(err).Err()
	}
	return status.Error(codes.Unavailable, err.Error())
}

// retryPushbackKey is the trailer grpc-go's retry policy reads a server's retry delay from (gRFC
// A6): a client whose policy retries ABORTED waits that long before its next attempt instead of its
// own backoff, which may spend its attempts while the holder still runs.
const retryPushbackKey = "grpc-retry-pushback-ms"

// inFlight is the answer to a call whose key another attempt holds: ABORTED with a RetryInfo of
// delay, and the same delay in the retry-pushback trailer for gRPC's own retries.
func inFlight(ctx context.Context, err error, delay time.Duration) error {
	_ = grpc.SetTrailer(ctx, metadata.Pairs(retryPushbackKey, strconv.FormatInt(delay.Milliseconds(), 10)))
	return withDetail(codes.Aborted, err.Error(), &errdetails.RetryInfo{RetryDelay: durationpb.New(delay)})
}

// withDetail returns a status error with one detail message.
func withDetail(c codes.Code, msg string, detail protoadapt.MessageV1) error {
	st, err := status.New(c, msg).WithDetails(detail)
	if err != nil {
		return status.Error(c, msg)
	}
	return st.Err()
}
