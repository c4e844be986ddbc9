package grpcx

import (
	"context"
	"errors"
	"log/slog"
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

// UnaryServerInterceptor returns the interceptor of [NewUnaryServerInterceptor]. It panics when guard
// is nil: that is a programming error, found when the server is built.
func UnaryServerInterceptor(guard *idemkit.Guard, opts *Options) grpc.UnaryServerInterceptor {
	i, err := NewUnaryServerInterceptor(guard, opts)
	if err != nil {
		panic(err)
	}
	return i
}

// NewUnaryServerInterceptor returns a unary server interceptor that runs each guarded call's handler
// at most once per idempotency key and answers duplicates from the record (see the package
// documentation for the status codes). opts may be nil. It returns an error when guard is nil. The
// interceptor is safe for concurrent use.
func NewUnaryServerInterceptor(guard *idemkit.Guard, opts *Options) (grpc.UnaryServerInterceptor, error) {
	if guard == nil {
		return nil, errNoGuard
	}
	s := &server{g: guard, c: opts.withDefaults()}
	return s.intercept, nil
}

type server struct {
	g *idemkit.Guard
	c config
}

// call is the state of one guarded call.
type call struct {
	ran  bool  // the handler ran
	resp any   // its response
	herr error // its error
	ferr error // the error returned to the Guard (herr, marked permanent or not, or an encoding error)
}

// errRollback makes a Transactor roll back when the record must not commit.
var errRollback = errors.New("grpcx: roll back")

func (s *server) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	method := info.FullMethod
	if !s.c.guarded(method) {
		return handler(ctx, req)
	}
	msg, ok := req.(proto.Message)
	if !ok {
		return nil, status.Errorf(codes.Internal, "grpcx: %s: request %T is not a proto message", method, req)
	}
	key, err := s.c.key(ctx, method, msg)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if key == "" {
		if s.c.required(method) {
			return nil, status.Errorf(codes.InvalidArgument, "grpcx: %s requires an idempotency key (metadata %q)", method, MetadataKey)
		}
		return handler(ctx, req)
	}
	fp, err := fingerprint(method, msg)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	c := idemkit.Call{Scope: s.c.scope(method), Key: key, Fingerprint: fp}

	var st call
	run := func(ctx context.Context) ([]byte, error) {
		st = call{ran: true}
		st.resp, st.herr = handler(ctx, req)
		var val []byte
		val, st.ferr = s.outcome(st.resp, st.herr)
		return val, st.ferr
	}
	if s.c.tx == nil {
		res, err := s.g.Do(ctx, c, run)
		if !st.ran {
			return s.answer(ctx, res, err)
		}
		if err != st.ferr {
			// The handler's effects happened but its outcome could not be recorded (a store error,
			// or a newer attempt took the key over): its answer is still the truth about this call.
			s.c.logger.WarnContext(ctx, "grpcx: outcome not recorded", slog.String("method", method), slog.Any("error", err))
		}
		return st.resp, st.herr
	}

	var res idemkit.Result
	var gerr error
	called, commit := false, false
	txErr := s.c.tx(ctx, func(ctx context.Context, tx idemkit.Store) error {
		st, called, commit = call{}, true, false
		res, gerr = s.g.DoTx(ctx, tx, c, run)
		// Keep the transaction only when the record says what the handler did: success, or a
		// permanent failure recorded as REJECTED. A replay or a refusal wrote nothing worth keeping;
		// a retryable failure, or a record that could not be finished, takes the handler's writes back.
		commit = st.ran && gerr == st.ferr && (gerr == nil || idemkit.IsPermanent(gerr))
		if !commit {
			return errRollback
		}
		return nil
	})
	switch {
	case !called:
		// The transaction could not begin: nothing ran.
		return nil, status.Errorf(codes.Unavailable, "grpcx: beginning a transaction for %s: %v", method, txErr)
	case !st.ran:
		return s.answer(ctx, res, gerr)
	case commit && txErr != nil:
		// The commit failed: neither the handler's writes nor the record exist; the call may be retried.
		return nil, status.Errorf(codes.Unavailable, "grpcx: committing %s: %v", method, txErr)
	case commit:
		return st.resp, st.herr
	case gerr != st.ferr:
		// The record could not be written (store error, fenced): rolled back with the handler's writes.
		return nil, s.storeStatus(gerr)
	case st.herr == nil:
		// The response could not be encoded for storage: rolled back with the rest.
		return nil, status.Convert(gerr).Err()
	}
	return st.resp, st.herr // a retryable failure, rolled back
}

// outcome turns the handler's answer into what the Guard stores: the encoded response on success,
// the encoded status with a permanent error, or a retryable error (stored as FAILED, not replayed).
func (s *server) outcome(resp any, herr error) ([]byte, error) {
	if herr != nil {
		st := status.Convert(herr)
		if idemkit.IsPermanent(herr) || s.c.permanent(st) {
			b, err := encodeStatus(st)
			if err != nil {
				return nil, herr // not storable: treat as retryable
			}
			return b, idemkit.Permanent(herr)
		}
		return nil, herr
	}
	m, ok := resp.(proto.Message)
	if !ok {
		return nil, status.Errorf(codes.Internal, "grpcx: response %T is not a proto message", resp)
	}
	return encodeResponse(m)
}

// answer answers a call whose handler did not run: a replay or a refusal.
func (s *server) answer(ctx context.Context, res idemkit.Result, err error) (any, error) {
	if res.Replayed {
		_ = grpc.SetHeader(ctx, metadata.Pairs(ReplayedKey, "true"))
		if err != nil {
			st, derr := decodeStatus(res.Value)
			if derr != nil || len(res.Value) == 0 {
				return nil, status.Error(codes.Unknown, err.Error())
			}
			return nil, st.Err()
		}
		m, derr := decodeResponse(res.Value, s.c.resolver)
		if derr != nil {
			return nil, status.Error(codes.Internal, derr.Error())
		}
		return m, nil
	}
	var inflight *idemkit.InFlightError
	switch {
	case errors.As(err, &inflight):
		return nil, withDetail(codes.Aborted, err.Error(), &errdetails.RetryInfo{RetryDelay: durationpb.New(max(inflight.RetryAfter, minRetryDelay))})
	case errors.Is(err, idemkit.ErrInFlight):
		return nil, withDetail(codes.Aborted, err.Error(), &errdetails.RetryInfo{RetryDelay: durationpb.New(minRetryDelay)})
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

// withDetail returns a status error with one detail message.
func withDetail(c codes.Code, msg string, detail protoadapt.MessageV1) error {
	st, err := status.New(c, msg).WithDetails(detail)
	if err != nil {
		return status.Error(c, msg)
	}
	return st.Err()
}
