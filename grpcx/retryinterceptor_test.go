package grpcx_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/idemkit/idemkit/grpcx"
	"github.com/idemkit/idemkit/internal/chaosrpc"
)

// retryInterceptor is an application retry interceptor (as go-grpc-middleware's retry): it calls
// the rest of the chain again, up to attempts times, while the answer is UNAVAILABLE.
func retryInterceptor(attempts int) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		var err error
		for range attempts {
			if err = invoker(ctx, method, req, reply, cc, opts...); status.Code(err) != codes.Unavailable {
				return err
			}
		}
		return err
	}
}

// TestClientKeyAcrossRetryInterceptor: the key interceptor must be chained before (outside) an
// application retry interceptor, which then resends the call with the key it added; chained after
// it, the key interceptor runs once per attempt and gives each attempt a key of its own, so the
// handler runs again for every attempt (what the package documentation warns of).
func TestClientKeyAcrossRetryInterceptor(t *testing.T) {
	for _, tc := range []struct {
		name     string
		chain    []grpc.UnaryClientInterceptor
		wantKeys int
	}{
		{"key interceptor outside", []grpc.UnaryClientInterceptor{grpcx.UnaryClientInterceptor(nil), retryInterceptor(3)}, 1},
		{"key interceptor inside", []grpc.UnaryClientInterceptor{retryInterceptor(3), grpcx.UnaryClientInterceptor(nil)}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			seen := map[string]int{} // key → attempts reaching the server
			flaky := grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
				k := metadata.ValueFromIncomingContext(ctx, grpcx.MetadataKey)
				if len(k) != 1 {
					return nil, status.Error(codes.Internal, "no key")
				}
				mu.Lock()
				seen[k[0]]++
				first := len(seen) == 1 && seen[k[0]] == 1
				mu.Unlock()
				if first {
					return nil, status.Error(codes.Unavailable, "first attempt fails") // retryable, not stored
				}
				return h(ctx, req)
			})
			e := setup(t, flaky)
			cc, err := grpc.NewClient(e.cc.Target(), grpc.WithTransportCredentials(insecure.NewCredentials()),
				grpc.WithChainUnaryInterceptor(tc.chain...))
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if _, err := chaosrpc.Charge(ctx, cc, charge(map[string]any{"account": 1, "amount": 2})); err != nil {
				t.Fatalf("call: %v", err)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(seen) != tc.wantKeys {
				t.Fatalf("keys over the attempts: %v, want %d", seen, tc.wantKeys)
			}
		})
	}
}
