package grpcx

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/idemkit/idemkit"
)

// Defaults of [Options] and [ClientOptions].
const (
	// MetadataKey is the request metadata field carrying the idempotency key (gRPC metadata names are
	// lower case; it is the HTTP Idempotency-Key header's name).
	MetadataKey = "idempotency-key"
	// ReplayedKey is the response header metadata field set to "true" on every replayed answer.
	ReplayedKey = "idempotent-replayed"
)

// Options configure the server interceptor ([UnaryServerInterceptor], [NewUnaryServerInterceptor]). The
// zero value works: every unary method whose request carries an `idempotency-key` metadata field is
// guarded in Execute mode, calls without a key pass through, the scope is the full method name.
// The interceptor copies the struct; later changes have no effect.
type Options struct {
	// Key returns a call's idempotency key; "" means the call has none. Defaults to
	// MetadataKeyFunc(MetadataKey). Compose sources with [FirstOf]; [FieldKey] reads a request field.
	Key KeyFunc
	// Guarded reports whether a method (its full name, "/pkg.Service/Method") is guarded at all.
	// Defaults to every method. Unguarded methods pass through untouched.
	Guarded func(method string) bool
	// Required reports whether a guarded method must carry a key: a call without one is answered
	// INVALID_ARGUMENT. Defaults to none: a call without a key passes through unguarded.
	Required func(method string) bool
	// Principal returns the caller (user, tenant) a call's key belongs to, e.g. from its authenticated
	// peer or token in ctx; it becomes part of the stored key (idemkit.PrincipalKey), so one caller is
	// never answered another's stored response for a key both sent. Return "" for an anonymous caller
	// (anonymous callers share one key space) or an error to refuse the call: PERMISSION_DENIED, or the
	// error's own code when it is a status error; the handler does not run. Defaults to none: keys are
	// shared by all callers of a method.
	Principal func(ctx context.Context) (string, error)
	// Scope returns the record scope of a method. Defaults to the full method name. A scope the Guard
	// would refuse (longer than its Options.MaxKeyLen, or holding control characters) is kept as its
	// hash (idemkit.HashedForm); an empty one answers INTERNAL, and the handler does not run.
	Scope func(method string) string
	// Permanent reports whether a handler's status error is a permanent answer, stored (REJECTED) and
	// replayed to duplicates with its code, message and details; other errors are retryable, not stored,
	// and the next call with the key runs again. Defaults to [DefaultPermanent]. An error wrapped with
	// idemkit.Permanent, or one the Guard's own classifier (idemkit.Options.IsPermanent) calls
	// permanent, is permanent whatever its code; one wrapped with idemkit.Retryable (and not
	// idemkit.Permanent) is retryable whatever its code.
	Permanent func(st *status.Status) bool
	// Tx, when set, runs each guarded call in Tx mode ([idemkit.Guard.Tx]) in a transaction the
	// Guard begins on Tx (a *record.Store on the database the handler writes to, over the Guard's
	// record table): the handler runs in it, finding it with [TxFromContext]
	// (record.GormTx(grpcx.TxFromContext(ctx)) for a record.Store), then the call's record is written
	// once, with its final outcome, beside the handler's writes, and both commit together: a crash
	// anywhere leaves either both or neither. A duplicate of a finished call is answered before the
	// handler runs; one finished by a concurrent attempt while the handler ran rolls the handler's
	// writes back and gets the stored answer. A retryable handler error rolls the writes back and
	// stores nothing; a permanent one rolls them back too and the Guard stores the REJECTED answer on
	// its own. Defaults to nil: Execute mode (Guard.Do), where the handler's effects and the record
	// are written separately.
	Tx idemkit.TxBeginner
	// Resolver finds the Go type of a stored response on replay, and of each google.protobuf.Any in a
	// request for its fingerprint. Defaults to protoregistry.GlobalTypes,
	// where every generated and well-known message type is registered.
	Resolver protoregistry.MessageTypeResolver
	// InFlightRetryDelay bounds the retry delay of the google.rpc.RetryInfo sent with ABORTED to a
	// duplicate of a call in flight: the holder's remaining lock or lease, at most this, at least
	// 50 ms. The holder's remaining time is only an upper bound of its run (30 s by default, and the
	// whole Lease in Tx mode, for a call that may finish in milliseconds), so a client honouring the
	// hint as sent would wait that long; httpx caps its Retry-After the same way. Defaults to
	// [DefaultInFlightRetryDelay] (1 s); negative is an error.
	InFlightRetryDelay time.Duration
	// Logger receives a line for each failure to record an outcome. Defaults to discarding.
	Logger *slog.Logger
}

// DefaultInFlightRetryDelay is the longest retry delay an ABORTED answer to a duplicate of a call in
// flight suggests (see Options.InFlightRetryDelay).
const DefaultInFlightRetryDelay = time.Second

// config is Options with the defaults filled in.
type config struct {
	key       KeyFunc
	guarded   func(string) bool
	required  func(string) bool
	scope     func(string) string
	principal func(context.Context) (string, error)
	permanent func(*status.Status) bool
	tx        idemkit.TxBeginner
	resolver  protoregistry.MessageTypeResolver
	logger    *slog.Logger
	retryMax  time.Duration // Options.InFlightRetryDelay
	// metadataKey: the key comes from the idempotency-key metadata (Options.Key left nil), which the
	// answer to a Required call without a key may name.
	metadataKey bool
}

func (o *Options) withDefaults() config {
	var in Options
	if o != nil {
		in = *o
	}
	c := config{
		key:       in.Key,
		guarded:   in.Guarded,
		required:  in.Required,
		scope:     in.Scope,
		principal: in.Principal,
		permanent: in.Permanent,
		tx:        in.Tx,
		resolver:  in.Resolver,
		logger:    cmp.Or(in.Logger, slog.New(slog.DiscardHandler)),
		retryMax:  cmp.Or(in.InFlightRetryDelay, DefaultInFlightRetryDelay),
	}
	if c.key == nil {
		c.key, c.metadataKey = MetadataKeyFunc(MetadataKey), true
	}
	if c.guarded == nil {
		c.guarded = func(string) bool { return true }
	}
	if c.required == nil {
		c.required = func(string) bool { return false }
	}
	if c.scope == nil {
		c.scope = func(m string) string { return m }
	}
	if c.permanent == nil {
		c.permanent = DefaultPermanent
	}
	if c.resolver == nil {
		c.resolver = protoregistry.GlobalTypes
	}
	return c
}

// DefaultPermanent reports whether st is a permanent answer: the codes that say the request itself
// cannot succeed as sent, whatever happens elsewhere — INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS,
// PERMISSION_DENIED, FAILED_PRECONDITION, OUT_OF_RANGE and UNIMPLEMENTED. Every other code
// (UNAVAILABLE, INTERNAL, DEADLINE_EXCEEDED, ABORTED, RESOURCE_EXHAUSTED, CANCELLED, UNKNOWN,
// DATA_LOSS, UNAUTHENTICATED) is retryable: not stored, the next call with the key runs again.
// UNAUTHENTICATED is retryable because fresh credentials may make the same request succeed.
func DefaultPermanent(st *status.Status) bool {
	switch st.Code() {
	case codes.InvalidArgument, codes.NotFound, codes.AlreadyExists, codes.PermissionDenied,
		codes.FailedPrecondition, codes.OutOfRange, codes.Unimplemented:
		return true
	}
	return false
}

// errNoGuard is returned by NewUnaryServerInterceptor for a nil Guard.
var errNoGuard = errors.New("grpcx: nil Guard")
