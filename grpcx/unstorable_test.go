package grpcx_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/grpcx"
	"github.com/idemkit/idemkit/internal/chaosrpc"
	"github.com/idemkit/idemkit/memory"
)

// smallStore is a memory Store whose transactions refuse results over 16 bytes, as a column too
// narrow for them would.
type smallStore struct{ *memory.Store }

func (s smallStore) BeginTx(ctx context.Context) (idemkit.TxStore, error) {
	tx, err := s.Store.BeginTx(ctx)
	return smallTx{tx}, err
}

type smallTx struct{ idemkit.TxStore }

func (t smallTx) Insert(ctx context.Context, rec *idemkit.Record) error {
	if len(rec.Response) > 16 {
		return fmt.Errorf("%w: result of %d bytes", idemkit.ErrUnstorable, len(rec.Response))
	}
	return t.TxStore.Insert(ctx, rec)
}

// bigAnswer answers a response too large for smallStore.
type bigAnswer struct{ runs atomic.Int64 }

func (b *bigAnswer) Charge(ctx context.Context, req *structpb.Struct) (*structpb.Struct, error) {
	b.runs.Add(1)
	return structpb.NewStruct(map[string]any{"receipt": "a receipt longer than sixteen bytes"})
}

// TestTxUnstorableAnswersAsItsReplays: in Tx mode a response too large for the record rolls the
// handler's writes back and stores the key REJECTED; the first call was answered UNAVAILABLE (retry)
// while every retry got the rejection's UNKNOWN, for good.
func TestTxUnstorableAnswersAsItsReplays(t *testing.T) {
	store := smallStore{memory.NewStore()}
	guard, err := idemkit.New(store, nil)
	if err != nil {
		t.Fatal(err)
	}
	biz := &bigAnswer{}
	cc := mustClient(t, serveGuardedWith(t, guard, &grpcx.Options{Tx: store}, biz))
	ctx := grpcx.WithKey(context.Background(), "k-big-1")
	_, err1 := chaosrpc.Charge(ctx, cc, charge(map[string]any{"amount": 1}))
	_, err2 := chaosrpc.Charge(ctx, cc, charge(map[string]any{"amount": 1}))
	s1, s2 := status.Convert(err1), status.Convert(err2)
	if biz.runs.Load() != 1 {
		t.Fatalf("handler ran %d times", biz.runs.Load())
	}
	if s1.Code() == codes.OK || s1.Code() == codes.Unavailable || s1.Code() != s2.Code() {
		t.Fatalf("first call %v, its retry %v: want one code, not one that says to retry", s1, s2)
	}
}

// smallFinishStore is a memory Store whose finishes refuse results over 16 bytes, as a column too
// narrow for them would.
type smallFinishStore struct{ *memory.Store }

func (s smallFinishStore) Update(ctx context.Context, rec *idemkit.Record, prev idemkit.Version) error {
	if len(rec.Response) > 16 {
		return fmt.Errorf("%w: result of %d bytes", idemkit.ErrUnstorable, len(rec.Response))
	}
	return s.Store.Update(ctx, rec, prev)
}

// TestExecuteUnstorableIsLoggedAsRecordedRejected: in Execute mode a response too large for the record
// leaves the key REJECTED without it (the handler's effects happened: it must not run again). The
// first call gets the handler's answer and its retries UNKNOWN, but grpcx logged "outcome not
// recorded", which says the opposite of what the record holds. It now logs what was recorded.
func TestExecuteUnstorableIsLoggedAsRecordedRejected(t *testing.T) {
	store := smallFinishStore{memory.NewStore()}
	guard, err := idemkit.New(store, nil)
	if err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(&lockedWriter{mu: &mu, w: &logs}, nil))
	biz := &bigAnswer{}
	cc := mustClient(t, serveGuardedWith(t, guard, &grpcx.Options{Logger: logger}, biz))
	ctx := grpcx.WithKey(context.Background(), "k-big-exec")
	_, err1 := chaosrpc.Charge(ctx, cc, charge(map[string]any{"amount": 1}))
	_, err2 := chaosrpc.Charge(ctx, cc, charge(map[string]any{"amount": 1}))
	if biz.runs.Load() != 1 {
		t.Fatalf("handler ran %d times", biz.runs.Load())
	}
	if err1 != nil || status.Code(err2) != codes.Unknown {
		t.Fatalf("first call %v, its retry %v: want the handler's answer, then UNKNOWN", err1, err2)
	}
	rec, err := guard.Get(context.Background(), chaosrpc.ChargeMethod, "k-big-exec")
	if err != nil || rec.Status != idemkit.StatusRejected {
		t.Fatalf("record %+v, %v: want REJECTED", rec, err)
	}
	mu.Lock()
	out := logs.String()
	mu.Unlock()
	if strings.Contains(out, "outcome not recorded") || !strings.Contains(out, "REJECTED") {
		t.Fatalf("log %q: want the REJECTED record named, not \"outcome not recorded\"", out)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
