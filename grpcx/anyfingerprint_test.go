package grpcx_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/grpcx"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/lock"
)

// envelopeMethod takes a google.protobuf.Any (an event envelope) and answers it back.
const envelopeMethod = "/idemkit.test.Envelopes/Put"

// envelopes is a service whose method takes any message packed in a google.protobuf.Any.
type envelopes struct{ runs atomic.Int64 }

func (e *envelopes) desc() *grpc.ServiceDesc {
	return &grpc.ServiceDesc{
		ServiceName: "idemkit.test.Envelopes",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{MethodName: "Put", Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			in := new(anypb.Any)
			if err := dec(in); err != nil {
				return nil, err
			}
			return ic(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: envelopeMethod}, func(context.Context, any) (any, error) {
				e.runs.Add(1)
				return in, nil
			})
		}}},
	}
}

// TestRepackedAnyMatchesItself: the fingerprint was the deterministic encoding of the request, but
// a google.protobuf.Any in it holds bytes its sender encoded, maps in the sender's (random, in Go)
// order: a client that packed the same message again for its retry (anypb.New in its retry loop)
// sent other bytes for the same request and got FAILED_PRECONDITION, "key reused", a final code.
// The value of an Any whose type the server knows is now fingerprinted in its deterministic
// encoding: the same request matches itself however it was packed, and another one still does not.
func TestRepackedAnyMatchesItself(t *testing.T) {
	rdb := testsvc.Redis(t)
	store := mysqlRecords(t, "grpcx_anyfp_")
	prefix := store.Table() + ":"
	testsvc.CleanRedis(t, rdb, prefix)
	guard, err := idemkit.New(store, &idemkit.Options{Locker: lock.New(rdb, &lock.Options{Prefix: prefix})})
	if err != nil {
		t.Fatal(err)
	}
	biz := &envelopes{}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(grpcx.UnaryServerInterceptor(guard, nil)))
	srv.RegisterService(biz.desc(), biz)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	cc := mustClient(t, ln.Addr().String())

	event := map[string]any{"order": "o-1", "item": "book", "qty": 2, "price": 12.5, "currency": "EUR", "note": "gift"}
	put := func(fields map[string]any) (*anypb.Any, bool, error) {
		packed, err := anypb.New(charge(fields)) // packed anew for every attempt, as a retry loop does
		if err != nil {
			t.Fatal(err)
		}
		var hdr metadata.MD
		out := new(anypb.Any)
		err = cc.Invoke(grpcx.WithKey(context.Background(), "k-envelope"), envelopeMethod, packed, out, grpc.Header(&hdr))
		return out, len(hdr.Get(grpcx.ReplayedKey)) > 0, err
	}
	first, replayed, err := put(event)
	if err != nil || replayed {
		t.Fatalf("first call: %v (replayed %v)", err, replayed)
	}
	for attempt := 2; attempt <= 8; attempt++ {
		got, replayed, err := put(event)
		if err != nil || !replayed || !proto.Equal(got, first) {
			t.Fatalf("attempt %d of the same request, packed again: %v (replayed %v); want the first answer replayed", attempt, err, replayed)
		}
	}
	other := map[string]any{"order": "o-1", "item": "book", "qty": 3, "price": 12.5, "currency": "EUR", "note": "gift"}
	if _, _, err := put(other); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("another request under the key: %v, want FAILED_PRECONDITION", err)
	}
	if n := biz.runs.Load(); n != 1 {
		t.Fatalf("the handler ran %d times, want 1", n)
	}
}
