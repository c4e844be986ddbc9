package grpcx_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/grpcx"
	"github.com/idemkit/idemkit/memory"
)

// TestInFlightRetryDelayIsCapped: the RetryInfo sent with ABORTED for a key in flight was the
// holder's whole remaining lease (30 s by default, in Tx mode always the full Lease), so a client
// honouring it waited half a minute for a call that finished in milliseconds; httpx caps the same
// hint at 1 s. It is now at most Options.InFlightRetryDelay (1 s by default), at least 50 ms (found
// by a defect hunt).
func TestInFlightRetryDelayIsCapped(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  time.Duration
		want time.Duration // the largest delay allowed
	}{
		{"default", 0, grpcx.DefaultInFlightRetryDelay},
		{"set", 200 * time.Millisecond, 200 * time.Millisecond},
		{"below the floor", time.Millisecond, 50 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			guard, err := idemkit.New(memory.NewStore(), &idemkit.Options{Lease: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			icpt, err := grpcx.NewUnaryServerInterceptor(guard, &grpcx.Options{InFlightRetryDelay: tc.opt})
			if err != nil {
				t.Fatal(err)
			}
			info := &grpc.UnaryServerInfo{FullMethod: "/test.Payments/Charge"}
			ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(grpcx.MetadataKey, "k-inflight"))
			req, _ := structpb.NewStruct(map[string]any{"amount": 1})
			started, release := make(chan struct{}), make(chan struct{})
			first := make(chan error, 1)
			go func() {
				_, err := icpt(ctx, req, info, func(context.Context, any) (any, error) {
					close(started)
					<-release
					return structpb.NewStruct(map[string]any{"ok": true})
				})
				first <- err
			}()
			<-started
			_, err = icpt(ctx, req, info, func(context.Context, any) (any, error) {
				t.Error("the duplicate ran the handler")
				return nil, nil
			})
			close(release)
			if err := <-first; err != nil {
				t.Fatalf("first call: %v", err)
			}
			st := status.Convert(err)
			var ri *errdetails.RetryInfo
			for _, d := range st.Details() {
				if r, ok := d.(*errdetails.RetryInfo); ok {
					ri = r
				}
			}
			if st.Code() != codes.Aborted || ri == nil {
				t.Fatalf("duplicate got %v %v, want ABORTED with RetryInfo", st.Code(), st.Details())
			}
			if d := ri.GetRetryDelay().AsDuration(); d > tc.want || d < 50*time.Millisecond {
				t.Fatalf("retry delay %v, want between 50ms and %v", d, tc.want)
			}
		})
	}
	if _, err := grpcx.NewUnaryServerInterceptor(&idemkit.Guard{}, &grpcx.Options{InFlightRetryDelay: -time.Second}); err == nil {
		t.Fatal("a negative InFlightRetryDelay was accepted")
	}
}
