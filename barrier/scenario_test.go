package barrier

// The scenarios of DTM's own barrier tests (test/saga_barrier_test.go, test/tcc_barrier_test.go,
// test/saga_barrier_redis_test.go), driven directly: each delivery of a branch operation is a call with a
// freshly built Branch, as a handler would build it from the request.

import (
	"context"
	"errors"
	"testing"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testsvc"
)

// delivery is one call of a branch operation.
type delivery struct {
	branchID string
	op       string
	uid      int
	c        change
	delta    int
	fail     bool
	want     Outcome
	wantErr  bool // a permanent business failure (FAILURE)
}

// deliver runs ds in order for gid and checks each outcome.
func deliver(t *testing.T, k bank, transType, gid string, ds ...delivery) {
	t.Helper()
	ctx := context.Background()
	for i, d := range ds {
		b, err := NewBranch(transType, gid, d.branchID, d.op)
		if err != nil {
			t.Fatal(err)
		}
		out, err := k.run(ctx, b, d.uid, d.c, d.delta, d.fail)
		if d.wantErr {
			if !errors.Is(err, errFailure) && !errors.Is(err, ErrBusinessFailure) || !idemkit.IsPermanent(err) {
				t.Fatalf("delivery %d (%s %s): err = %v, want a permanent FAILURE", i, d.branchID, d.op, err)
			}
		} else if err != nil {
			t.Fatalf("delivery %d (%s %s): %v", i, d.branchID, d.op, err)
		}
		if out != d.want {
			t.Fatalf("delivery %d (%s %s): outcome %s, want %s", i, d.branchID, d.op, out, d.want)
		}
	}
}

func checkAccounts(t *testing.T, k bank, want map[int]account) {
	t.Helper()
	if got := k.accounts(t); got[transOut] != want[transOut] || got[transIn] != want[transIn] {
		t.Fatalf("accounts %+v, want %+v", got, want)
	}
}

var unchanged = map[int]account{transOut: {initBalance, 0}, transIn: {initBalance, 0}}
var moved = map[int]account{transOut: {initBalance - amount, 0}, transIn: {initBalance + amount, 0}}

func eachBackend(t *testing.T, f func(t *testing.T, k bank)) {
	for _, be := range backends() {
		t.Run(be.name, func(t *testing.T) { f(t, be.new(t)) })
	}
}

func TestSagaBarrierNormal(t *testing.T) {
	eachBackend(t, func(t *testing.T, k bank) {
		gid := testsvc.Name("gid-")
		deliver(t, k, TransSaga, gid,
			delivery{branchID: "01", op: OpAction, uid: transOut, c: adjustBalance, delta: -amount, want: Proceed},
			delivery{branchID: "02", op: OpAction, uid: transIn, c: adjustBalance, delta: amount, want: Proceed},
		)
		checkAccounts(t, k, moved)
		if n := k.barrierRows(t, gid); n != 2 {
			t.Fatalf("%d barrier rows, want 2", n)
		}
	})
}

// TestSagaBarrierRollback: the TransIn action fails, so DTM compensates both branches; TransIn's
// compensation finds no action row (the failed action rolled back with its barrier row): a null
// compensation, which must not give the money back. A late redelivery of the failed action then hangs.
func TestSagaBarrierRollback(t *testing.T) {
	eachBackend(t, func(t *testing.T, k bank) {
		gid := testsvc.Name("gid-")
		deliver(t, k, TransSaga, gid,
			delivery{branchID: "01", op: OpAction, uid: transOut, c: adjustBalance, delta: -amount, want: Proceed},
			delivery{branchID: "02", op: OpAction, uid: transIn, c: adjustBalance, delta: amount, fail: true, want: Proceed, wantErr: true},
			delivery{branchID: "02", op: OpCompensate, uid: transIn, c: adjustBalance, delta: -amount, want: NullCompensation},
			delivery{branchID: "01", op: OpCompensate, uid: transOut, c: adjustBalance, delta: amount, want: Proceed},
			delivery{branchID: "02", op: OpAction, uid: transIn, c: adjustBalance, delta: amount, want: Hanging},
		)
		checkAccounts(t, k, unchanged)
	})
}

// TestSagaBarrierDuplicate: an action and a compensation each delivered twice take effect once.
func TestSagaBarrierDuplicate(t *testing.T) {
	eachBackend(t, func(t *testing.T, k bank) {
		gid := testsvc.Name("gid-")
		action := delivery{branchID: "01", op: OpAction, uid: transOut, c: adjustBalance, delta: -amount}
		deliver(t, k, TransSaga, gid, with(action, Proceed), with(action, Duplicate))
		checkAccounts(t, k, map[int]account{transOut: {initBalance - amount, 0}, transIn: {initBalance, 0}})
		compensate := delivery{branchID: "01", op: OpCompensate, uid: transOut, c: adjustBalance, delta: amount}
		deliver(t, k, TransSaga, gid, with(compensate, Proceed), with(compensate, Duplicate))
		checkAccounts(t, k, unchanged)
		if n := k.barrierRows(t, gid); n != 2 {
			t.Fatalf("%d barrier rows, want 2 (action, compensate)", n)
		}
	})
}

func with(d delivery, want Outcome) delivery { d.want = want; return d }

func TestTccBarrierNormal(t *testing.T) {
	eachBackend(t, func(t *testing.T, k bank) {
		gid := testsvc.Name("gid-")
		deliver(t, k, TransTCC, gid,
			delivery{branchID: "01", op: OpTry, uid: transOut, c: adjustTrading, delta: -amount, want: Proceed},
			delivery{branchID: "02", op: OpTry, uid: transIn, c: adjustTrading, delta: amount, want: Proceed},
		)
		checkAccounts(t, k, map[int]account{transOut: {initBalance, -amount}, transIn: {initBalance, amount}})
		deliver(t, k, TransTCC, gid,
			delivery{branchID: "01", op: OpConfirm, uid: transOut, c: settle, delta: -amount, want: Proceed},
			delivery{branchID: "02", op: OpConfirm, uid: transIn, c: settle, delta: amount, want: Proceed},
			delivery{branchID: "02", op: OpConfirm, uid: transIn, c: settle, delta: amount, want: Duplicate},
		)
		checkAccounts(t, k, moved)
	})
}

// TestTccBarrierRollback: TransIn's try fails, DTM cancels both: TransOut's cancel releases the reserve,
// TransIn's cancel is a null compensation.
func TestTccBarrierRollback(t *testing.T) {
	eachBackend(t, func(t *testing.T, k bank) {
		gid := testsvc.Name("gid-")
		deliver(t, k, TransTCC, gid,
			delivery{branchID: "01", op: OpTry, uid: transOut, c: adjustTrading, delta: -amount, want: Proceed},
			delivery{branchID: "02", op: OpTry, uid: transIn, c: adjustTrading, delta: amount, fail: true, want: Proceed, wantErr: true},
			delivery{branchID: "02", op: OpCancel, uid: transIn, c: adjustTrading, delta: -amount, want: NullCompensation},
			delivery{branchID: "01", op: OpCancel, uid: transOut, c: adjustTrading, delta: amount, want: Proceed},
		)
		checkAccounts(t, k, unchanged)
	})
}

// TestTccBarrierDisorder: the try is delayed, the global transaction times out and cancel is delivered
// twice before the try arrives; the cancels do nothing (null compensation, then duplicate) and the late
// try hangs: balances unchanged.
func TestTccBarrierDisorder(t *testing.T) {
	eachBackend(t, func(t *testing.T, k bank) {
		gid := testsvc.Name("gid-")
		cancel := delivery{branchID: "01", op: OpCancel, uid: transOut, c: adjustTrading, delta: amount}
		deliver(t, k, TransTCC, gid,
			with(cancel, NullCompensation),
			with(cancel, Duplicate),
			delivery{branchID: "01", op: OpTry, uid: transOut, c: adjustTrading, delta: -amount, want: Hanging},
		)
		checkAccounts(t, k, unchanged)
	})
}

// TestTccBarrierPanic: a panic inside the business rolls the barrier rows back with the business's
// writes and propagates; the next delivery runs the business. On Redis the business's Lua error leaves
// the barrier keys unset and comes back as an error.
func TestTccBarrierPanic(t *testing.T) {
	eachBackend(t, func(t *testing.T, k bank) {
		ctx := context.Background()
		gid := testsvc.Name("gid-")
		b, _ := NewBranch(TransSaga, gid, "01", OpAction)
		recovered, err := k.panicking(ctx, b, transOut)
		if _, isRedis := k.(*redisBank); isRedis {
			if err == nil {
				t.Fatal("Lua error not returned")
			}
		} else if recovered != "business panicked" {
			t.Fatalf("recovered %v (err %v), want the business's panic", recovered, err)
		}
		if n := k.barrierRows(t, gid); n != 0 {
			t.Fatalf("%d barrier rows after the panic, want 0", n)
		}
		checkAccounts(t, k, unchanged)
		deliver(t, k, TransSaga, gid,
			delivery{branchID: "01", op: OpAction, uid: transOut, c: adjustBalance, delta: -amount, want: Proceed})
	})
}
