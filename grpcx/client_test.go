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

// retryConfig is a service config whose retry policy retries UNAVAILABLE.
const retryConfig = `{"methodConfig":[{"name":[{"service":"` + chaosrpc.ServiceName + `"}],
	"retryPolicy":{"maxAttempts":4,"initialBackoff":"0.01s","maxBackoff":"0.05s","backoffMultiplier":2,
	"retryableStatusCodes":["UNAVAILABLE"]}}]}`

// TestClientKeyReusedByRetries: the client interceptor attaches one key per logical call; gRPC's
// retry policy resends the call with the same key after a retryable failure, and an application
// loop that derived its context with WithNewKey sends the same key every time.
func TestClientKeyReusedByRetries(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]int{} // key → attempts reaching the server
	flaky := grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		k := metadata.ValueFromIncomingContext(ctx, grpcx.MetadataKey)
		if len(k) != 1 {
			return nil, status.Error(codes.Internal, "no key")
		}
		mu.Lock()
		seen[k[0]]++
		n := seen[k[0]]
		mu.Unlock()
		if n == 1 {
			return nil, status.Error(codes.Unavailable, "first attempt fails") // retryable, not stored
		}
		return h(ctx, req)
	})
	e := setup(t, flaky)
	cc, err := grpc.NewClient(e.cc.Target(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(retryConfig),
		grpc.WithChainUnaryInterceptor(grpcx.UnaryClientInterceptor(nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// A logical call without a key: the interceptor adds one, the retry policy reuses it.
	if _, err := chaosrpc.Charge(ctx, cc, charge(map[string]any{"account": 1, "amount": 2})); err != nil {
		t.Fatalf("call with retry policy: %v", err)
	}
	mu.Lock()
	if len(seen) != 1 {
		t.Fatalf("want one key over the attempts, got %v", seen)
	}
	for k, n := range seen {
		if n != 2 {
			t.Fatalf("key %s reached the server %d times, want 2 (failed attempt + retry)", k, n)
		}
	}
	mu.Unlock()

	// An application retry loop: one key for the loop.
	loopCtx, key := grpcx.WithNewKey(ctx)
	req := charge(map[string]any{"account": 1, "amount": 3})
	var replayed int
	for range 3 {
		var hdr metadata.MD
		if _, err := chaosrpc.Charge(loopCtx, cc, req, grpc.Header(&hdr)); err != nil {
			t.Fatalf("loop call: %v", err)
		}
		if len(hdr.Get(grpcx.ReplayedKey)) > 0 {
			replayed++
		}
	}
	mu.Lock()
	defer mu.Unlock()
	// The flaky interceptor sits behind grpcx: replays never reach it.
	if seen[key] != 2 || replayed != 2 {
		t.Fatalf("loop key %s: %d handler attempts (want 2: one failed, one ran), %d replayed (want 2)", key, seen[key], replayed)
	}
}
