package grpcx_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/grpcx"
	"github.com/idemkit/idemkit/internal/chaosrpc"
	"github.com/idemkit/idemkit/memory"
)

// downAfterTx is smallStore whose own writes (outside a transaction: the REJECTED record Tx mode
// writes after rolling the handler's writes back) fail, as a database gone down would.
type downAfterTx struct{ smallStore }

func (downAfterTx) Insert(context.Context, *idemkit.Record) error {
	return errors.New("connection refused")
}

// TestTxUnstorableNotRecordedIsUnavailable: when the response does not fit the record and the
// REJECTED record that replaces it cannot be written either, nothing is stored and a retry runs the
// handler again: the first call must not be answered UNKNOWN "for good" (the README's row for a
// record that could not be written after the handler says UNAVAILABLE).
func TestTxUnstorableNotRecordedIsUnavailable(t *testing.T) {
	store := downAfterTx{smallStore{memory.NewStore()}}
	guard, err := idemkit.New(store, nil)
	if err != nil {
		t.Fatal(err)
	}
	biz := &bigAnswer{}
	cc := mustClient(t, serveGuardedWith(t, guard, &grpcx.Options{Tx: store}, biz))
	ctx := grpcx.WithKey(context.Background(), "k-big-down")
	_, err1 := chaosrpc.Charge(ctx, cc, charge(map[string]any{"amount": 1}))
	if s := status.Convert(err1); s.Code() != codes.Unavailable || strings.Contains(s.Message(), "recorded as") {
		t.Fatalf("first call %v; nothing was recorded (a retry runs again): want UNAVAILABLE, not saying it was recorded", s)
	}
}
