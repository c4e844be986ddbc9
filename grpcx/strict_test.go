package grpcx_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/grpcx"
	"github.com/idemkit/idemkit/internal/chaosrpc"
)

// unanswerable is a Payments business whose answer is not the business's: a response proto cannot
// encode (a string that is not UTF-8), or, once its caller left, its context's error.
type unanswerable struct {
	runs    atomic.Int64
	mode    string
	started chan struct{}
	done    chan struct{}
}

func (u *unanswerable) Charge(ctx context.Context, _ *structpb.Struct) (*structpb.Struct, error) {
	if u.runs.Add(1) > 1 {
		return structpb.NewStruct(map[string]any{"ok": true})
	}
	defer close(u.done)
	switch u.mode {
	case "not encodable":
		return &structpb.Struct{Fields: map[string]*structpb.Value{"receipt": structpb.NewStringValue("\xff\xfe")}}, nil
	case "caller left, ctx.Err":
		close(u.started)
		<-ctx.Done()
		return nil, ctx.Err()
	default: // caller left, status of the context error
		close(u.started)
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

// TestUnansweredOutcomesStayRetryableUnderAStrictClassifier: a handler's context error once its caller
// left is no business failure. Under an idemkit.Options.IsPermanent calling every unknown error
// permanent it was recorded REJECTED (stored with its CANCELLED status), and every retry of the key got
// the replayed rejection instead of running again. A response grpcx cannot encode for the record is
// no business failure either, but in Execute mode the handler's effects happened: it is recorded
// REJECTED whatever the classifier, and a retry does not run again (TestExecuteUnencodableResponseRunsOnce).
func TestUnansweredOutcomesStayRetryableUnderAStrictClassifier(t *testing.T) {
	store := mysqlRecords(t, "grpcx_strict_")
	errTransient := errors.New("transient")
	guard, err := idemkit.New(store, &idemkit.Options{IsPermanent: func(err error) bool { return !errors.Is(err, errTransient) }})
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"not encodable", "caller left, ctx.Err", "caller left, status"} {
		t.Run(mode, func(t *testing.T) {
			biz := &unanswerable{mode: mode, started: make(chan struct{}), done: make(chan struct{})}
			cc := mustClient(t, serveGuarded(t, guard, biz))
			key := "k-" + mode
			ctx, cancel := context.WithCancel(grpcx.WithKey(context.Background(), key))
			go func() {
				if mode != "not encodable" {
					<-biz.started
					cancel()
				}
			}()
			_, _ = chaosrpc.Charge(ctx, cc, charge(map[string]any{"amount": 1}))
			cancel()
			<-biz.done
			var rec *idemkit.Record
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
				if rec, err = guard.Get(context.Background(), chaosrpc.ChargeMethod, key); err != nil {
					t.Fatal(err)
				}
				if rec.Status != idemkit.StatusProcessing || time.Now().After(deadline) {
					break
				}
			}
			_, rerr := chaosrpc.Charge(grpcx.WithKey(context.Background(), key), cc, charge(map[string]any{"amount": 1}))
			if mode == "not encodable" {
				if rec.Status != idemkit.StatusRejected || status.Code(rerr) != codes.Unknown || biz.runs.Load() != 1 {
					t.Fatalf("record %s %q, retry %v, runs %d: want REJECTED, and the retry answered UNKNOWN without a run",
						rec.Status, rec.Error, rerr, biz.runs.Load())
				}
				return
			}
			if rec.Status != idemkit.StatusFailed {
				t.Fatalf("record %s %q, want FAILED", rec.Status, rec.Error)
			}
			if rerr != nil || biz.runs.Load() != 2 {
				t.Fatalf("retry: %v, runs %d: want it run again", rerr, biz.runs.Load())
			}
		})
	}
}
