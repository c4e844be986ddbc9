package grpcx_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/grpcx"
	"github.com/idemkit/idemkit/internal/chaosrpc"
	"github.com/idemkit/idemkit/memory"
)

// outlivesItsHold charges for longer than the Guard lets a claim be held, and gives up when its
// context ends, as a well-behaved handler does.
type outlivesItsHold struct{ runs atomic.Int64 }

func (o *outlivesItsHold) Charge(ctx context.Context, req *structpb.Struct) (*structpb.Struct, error) {
	o.runs.Add(1)
	select {
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	case <-time.After(20 * time.Second):
		return nil, errors.New("the watchdog never cancelled the handler")
	}
}

// TestWatchdogCancellationIsUnavailable: when the Guard's watchdog cancels a handler (MaxHold ran
// out, or the lock was lost: ErrLockLost) the handler answers its context's CANCELLED, and that
// went to a caller that had cancelled nothing — a code gRPC clients and retry policies take for the
// caller's own decision, never retried. Nothing was stored, so the call is answered UNAVAILABLE, and
// a retry with the key runs again.
func TestWatchdogCancellationIsUnavailable(t *testing.T) {
	for _, tx := range []bool{false, true} {
		store := memory.NewStore()
		guard, err := idemkit.New(store, &idemkit.Options{Watchdog: true, MaxHold: 50 * time.Millisecond, Lease: 150 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		opts := &grpcx.Options{}
		if tx {
			opts.Tx = store
		}
		biz := &outlivesItsHold{}
		cc := mustClient(t, serveGuardedWith(t, guard, opts, biz))
		ctx := grpcx.WithKey(context.Background(), "k-hold-1")
		for i := range 2 {
			_, err := chaosrpc.Charge(ctx, cc, charge(map[string]any{"amount": 1}))
			if status.Code(err) != codes.Unavailable {
				t.Fatalf("Tx %v, call %d: %v, want UNAVAILABLE", tx, i+1, err)
			}
		}
		if n := biz.runs.Load(); n != 2 {
			t.Fatalf("Tx %v: handler ran %d times, want 2 (nothing stored)", tx, n)
		}
	}
}

// marksThenOutlivesItsHold sets header and trailer metadata for the answer it means to give, then
// outlives its hold as outlivesItsHold does.
type marksThenOutlivesItsHold struct{ outlivesItsHold }

func (m *marksThenOutlivesItsHold) Charge(ctx context.Context, req *structpb.Struct) (*structpb.Struct, error) {
	_ = grpc.SetHeader(ctx, metadata.Pairs("x-ledger-entry", "42"))
	_ = grpc.SetTrailer(ctx, metadata.Pairs("x-charged", "yes"))
	return m.outlivesItsHold.Charge(ctx, req)
}

// TestWatchdogUnavailableCarriesNoHandlerMetadata: the UNAVAILABLE answering a handler the Guard's
// watchdog cancelled (nothing stored, a retry runs again) went out with the header and trailer the
// handler had set for the answer it never gave — metadata saying something was done, on an answer
// saying to retry. As httpx's 503 in the same case, it carries none of it (found by a defect hunt).
func TestWatchdogUnavailableCarriesNoHandlerMetadata(t *testing.T) {
	for _, tx := range []bool{false, true} {
		store := memory.NewStore()
		guard, err := idemkit.New(store, &idemkit.Options{Watchdog: true, MaxHold: 50 * time.Millisecond, Lease: 150 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		opts := &grpcx.Options{}
		if tx {
			opts.Tx = store
		}
		cc := mustClient(t, serveGuardedWith(t, guard, opts, &marksThenOutlivesItsHold{}))
		ctx := grpcx.WithKey(context.Background(), "k-hold-md")
		var header, trailer metadata.MD
		_, err = chaosrpc.Charge(ctx, cc, charge(map[string]any{"amount": 1}), grpc.Header(&header), grpc.Trailer(&trailer))
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("Tx %v: %v, want UNAVAILABLE", tx, err)
		}
		if len(header.Get("x-ledger-entry")) > 0 || len(trailer.Get("x-charged")) > 0 {
			t.Fatalf("Tx %v: UNAVAILABLE carried the handler's metadata: header %v trailer %v", tx, header, trailer)
		}
	}
}
