package grpcx_test

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/grpcx"
	"github.com/idemkit/idemkit/internal/chaosrpc"
	"github.com/idemkit/idemkit/memory"
)

// holder is a Payments business whose first run waits until released; it counts its runs.
type holder struct {
	runs             atomic.Int64
	started, release chan struct{}
}

func (h *holder) Charge(ctx context.Context, req *structpb.Struct) (*structpb.Struct, error) {
	if h.runs.Add(1) == 1 {
		close(h.started)
		<-h.release
	}
	return structpb.NewStruct(map[string]any{"ok": true})
}

// TestInFlightAnswerCarriesRetryPushback: ABORTED for a key in flight carried its retry delay only in
// google.rpc.RetryInfo, which gRPC's own retry policy ignores: a client whose policy retries ABORTED
// spent its attempts on its own backoff (a few milliseconds) while the holder still ran, and failed.
// The answer now also carries the delay in the grpc-retry-pushback-ms trailer (gRFC A6), which the
// retry policy honours: its next attempt waits for it and gets the replay (found by a defect hunt).
func TestInFlightAnswerCarriesRetryPushback(t *testing.T) {
	guard, err := idemkit.New(memory.NewStore(), &idemkit.Options{Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	biz := &holder{started: make(chan struct{}), release: make(chan struct{})}
	addr := serveGuardedWith(t, guard, &grpcx.Options{InFlightRetryDelay: 700 * time.Millisecond}, biz)
	req := charge(map[string]any{"amount": 3})
	ctx := grpcx.WithKey(context.Background(), "held")

	first := make(chan error, 1)
	go func() {
		_, err := chaosrpc.Charge(ctx, mustClient(t, addr), req)
		first <- err
	}()
	<-biz.started

	var trailer metadata.MD
	_, err = chaosrpc.Charge(ctx, mustClient(t, addr), req, grpc.Trailer(&trailer))
	st := status.Convert(err)
	var delay time.Duration
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			delay = ri.GetRetryDelay().AsDuration()
		}
	}
	if st.Code() != codes.Aborted || delay != 700*time.Millisecond {
		t.Fatalf("duplicate while the first runs: %v, retry delay %v; want ABORTED, 700ms", err, delay)
	}
	if got := trailer.Get("grpc-retry-pushback-ms"); len(got) != 1 || got[0] != strconv.FormatInt(delay.Milliseconds(), 10) {
		t.Fatalf("trailer grpc-retry-pushback-ms = %q, want [%d]", got, delay.Milliseconds())
	}

	// gRPC's retry policy, retrying ABORTED on a 1ms backoff: the first attempt meets the held key,
	// the holder is released, and the next attempt, held back by the pushback, gets the replay.
	config := fmt.Sprintf(`{"methodConfig":[{"name":[{"service":%q}],"retryPolicy":{"maxAttempts":5,
		"initialBackoff":"0.001s","maxBackoff":"0.001s","backoffMultiplier":1,"retryableStatusCodes":["ABORTED"]}}]}`, chaosrpc.ServiceName)
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDefaultServiceConfig(config))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	var header metadata.MD
	retried := make(chan error, 1)
	go func() {
		_, err := chaosrpc.Charge(ctx, cc, req, grpc.Header(&header))
		retried <- err
	}()
	time.Sleep(100 * time.Millisecond) // its first attempt meets the held key (a 1ms backoff would spend all five meanwhile)
	close(biz.release)
	if err := <-first; err != nil {
		t.Fatalf("first call: %v", err)
	}
	if err := <-retried; err != nil || header.Get(grpcx.ReplayedKey) == nil {
		t.Fatalf("call under gRPC's retry policy: %v, header %v; want the replay", err, header)
	}
	if n := biz.runs.Load(); n != 1 {
		t.Fatalf("the handler ran %d times", n)
	}
}
