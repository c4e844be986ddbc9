package grpcx

import (
	"context"
	"crypto/rand"
	"encoding/hex"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// ClientOptions configure [UnaryClientInterceptor]. The zero value works: every unary call without a
// key gets a fresh random one.
type ClientOptions struct {
	// Methods reports whether calls to a method (its full name) get a key. Defaults to every method.
	Methods func(method string) bool
	// NewKey returns a fresh key. Defaults to [NewKey] (128 random bits, hex).
	NewKey func() string
}

// NewKey returns a fresh idempotency key: 128 bits from crypto/rand as 32 hex digits.
func NewKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}

// WithKey returns ctx carrying key as the outgoing idempotency key, replacing any key ctx carried.
// Use it for a key the application chose (an order id), or to keep one key across an application's
// own retry loop: derive the context once, before the loop, and call with it every time.
func WithKey(ctx context.Context, key string) context.Context {
	md, _ := metadata.FromOutgoingContext(ctx) // a copy
	md = md.Copy()
	md.Set(MetadataKey, key)
	return metadata.NewOutgoingContext(ctx, md)
}

// WithNewKey returns ctx carrying a fresh key (see [WithKey]) and the key.
func WithNewKey(ctx context.Context) (context.Context, string) {
	k := NewKey()
	return WithKey(ctx, k), k
}

// KeyFromOutgoing returns the idempotency key ctx carries for outgoing calls, or "".
func KeyFromOutgoing(ctx context.Context) string {
	md, _ := metadata.FromOutgoingContext(ctx)
	if v := md.Get(MetadataKey); len(v) > 0 {
		return v[0]
	}
	return ""
}

// carriesKey reports whether ctx's outgoing metadata has the key field, even empty: an empty key is
// the application's, left for the server to refuse rather than replaced by a fresh key on each call.
func carriesKey(ctx context.Context) bool {
	md, _ := metadata.FromOutgoingContext(ctx)
	return len(md.Get(MetadataKey)) > 0
}

// UnaryClientInterceptor returns a unary client interceptor that attaches an idempotency key to every
// call that has none in its outgoing metadata. An interceptor runs once per logical call, above gRPC's
// own retries (the service config's retryPolicy, transparent retries), so every attempt of one call
// carries the same key and the server runs it once. A call that already carries a key ([WithKey],
// [WithNewKey]) keeps it: that is how an application retry loop keeps its key across calls. An
// empty key is kept too, and the server answers it INVALID_ARGUMENT: replaced, each attempt of such
// a loop would get a key of its own and run again. Chain it before (outside) any retry interceptor of
// the application's (go-grpc-middleware's retry, say): an interceptor outside it calls it once per
// attempt, and each attempt would get a key of its own and run the handler again. opts may be nil.
// The interceptor is safe for concurrent use.
func UnaryClientInterceptor(opts *ClientOptions) grpc.UnaryClientInterceptor {
	var o ClientOptions
	if opts != nil {
		o = *opts
	}
	if o.NewKey == nil {
		o.NewKey = NewKey
	}
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, callOpts ...grpc.CallOption) error {
		if (o.Methods == nil || o.Methods(method)) && !carriesKey(ctx) {
			ctx = WithKey(ctx, o.NewKey())
		}
		return invoker(ctx, method, req, reply, cc, callOpts...)
	}
}
