package batch

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// op is an operation whose outcome is the size of the batch that ran it.
type op struct {
	id   int
	size int
	err  error
}

// fixture is a Batcher whose lone operations block until released, recording the batches it ran.
type fixture struct {
	b       *Batcher[*op]
	release chan struct{}
	entered chan struct{}

	mu      sync.Mutex
	batches [][]int
	panicOn int // Many panics on a batch holding this id
}

func newFixture() *fixture {
	f := &fixture{release: make(chan struct{}), entered: make(chan struct{}, 16)}
	f.b = New(1, Funcs[*op]{
		One: func(ctx context.Context, o *op) {
			f.entered <- struct{}{}
			<-f.release
			o.size = 1
		},
		Many: func(ctx context.Context, ops []*op) {
			if _, ok := ctx.Deadline(); ok {
				panic("a batch of callers without deadlines has one")
			}
			ids := make([]int, len(ops))
			for i, o := range ops {
				ids[i] = o.id
				if o.id == f.panicOn {
					panic("boom")
				}
				o.size = len(ops)
			}
			f.mu.Lock()
			f.batches = append(f.batches, ids)
			f.mu.Unlock()
		},
		Fail: func(o *op, err error) {
			if o.err == nil {
				o.err = err
			}
		},
	})
	return f
}

// hold starts a lone operation and returns once it runs, holding the one slot in flight.
func (f *fixture) hold(t *testing.T) <-chan error {
	t.Helper()
	errc := make(chan error, 1)
	go func() { errc <- f.b.Do(context.Background(), &op{id: -1}) }()
	select {
	case <-f.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the lone operation never ran")
	}
	return errc
}

func (f *fixture) waitQueued(t *testing.T, n int) {
	t.Helper()
	for i := 0; f.b.Waiting() != n; i++ {
		if i > 10000 {
			t.Fatalf("%d waiting, want %d", f.b.Waiting(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestBatchesWhatWaited: operations that come while one is in flight leave together when it returns,
// and each gets its outcome; a withdrawn one (its context ended while it waited) is never run.
func TestBatchesWhatWaited(t *testing.T) {
	f := newFixture()
	held := f.hold(t)
	ops := []*op{{id: 1}, {id: 2}, {id: 3}}
	errs := make([]chan error, len(ops))
	for i, o := range ops {
		errs[i] = make(chan error, 1)
		go func() { errs[i] <- f.b.Do(context.Background(), o) }()
		f.waitQueued(t, i+1)
	}
	ctx, cancel := context.WithCancel(context.Background())
	withdrawn := &op{id: 4}
	werr := make(chan error, 1)
	go func() { werr <- f.b.Do(ctx, withdrawn) }()
	f.waitQueued(t, 4)
	cancel()
	if err := <-werr; !errors.Is(err, context.Canceled) || !errors.Is(err, ErrWithdrawn) {
		t.Fatalf("withdrawn operation: %v; want its cancellation and ErrWithdrawn", err)
	}
	f.waitQueued(t, 3)
	close(f.release)
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	for i, o := range ops {
		if err := <-errs[i]; err != nil || o.size != 3 {
			t.Errorf("operation %d: %v, batch of %d; want a batch of 3", o.id, err, o.size)
		}
	}
	if withdrawn.size != 0 || len(f.batches) != 1 {
		t.Errorf("batches %v; the withdrawn operation ran in a batch of %d", f.batches, withdrawn.size)
	}
	if f.b.InFlight() != 0 || f.b.Waiting() != 0 {
		t.Errorf("after: %d in flight, %d waiting", f.b.InFlight(), f.b.Waiting())
	}
}

// TestPanickingBatch: when Many panics, the sender's caller sees the panic, every other operation of
// the batch gets an error (never a silent success), and the Batcher goes on.
func TestPanickingBatch(t *testing.T) {
	f := newFixture()
	f.panicOn = 1
	held := f.hold(t)
	panicked := make(chan any, 1)
	go func() {
		defer func() { panicked <- recover() }()
		_ = f.b.Do(context.Background(), &op{id: 1})
	}()
	f.waitQueued(t, 1)
	other := &op{id: 2}
	errc := make(chan error, 1)
	go func() { errc <- f.b.Do(context.Background(), other) }()
	f.waitQueued(t, 2)
	close(f.release)
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	if r := <-panicked; r == nil {
		t.Fatal("the sender's caller did not see the panic")
	}
	if err := <-errc; err != nil || other.err == nil {
		t.Fatalf("the other operation: Do %v, outcome %v; want an error outcome", err, other.err)
	}
	after := &op{id: 3}
	if err := f.b.Do(context.Background(), after); err != nil || after.size != 1 {
		t.Fatalf("after the panic: %v, %d", err, after.size)
	}
	if f.b.InFlight() != 0 || f.b.Waiting() != 0 {
		t.Errorf("after: %d in flight, %d waiting", f.b.InFlight(), f.b.Waiting())
	}
}

// TestAbandonedOpIsSettled: when an operation's caller leaves while it is out in another caller's
// batch, Funcs.Abandon hears of it before Do returns, and Funcs.Settle once its batch has returned
// with its outcome, so that what undoes it can wait for it.
func TestAbandonedOpIsSettled(t *testing.T) {
	release, inMany, manyRelease := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	var abandoned, settled []*op
	b := New(1, Funcs[*op]{
		One: func(ctx context.Context, o *op) {
			if o.id < 0 {
				<-release
			}
			o.size = 1
		},
		Many: func(ctx context.Context, ops []*op) {
			close(inMany)
			<-manyRelease
			for _, o := range ops {
				o.size = len(ops)
			}
		},
		Fail: func(*op, error) {},
		Abandon: func(o *op) {
			mu.Lock()
			defer mu.Unlock()
			abandoned = append(abandoned, o)
		},
		Settle: func(o *op) {
			mu.Lock()
			defer mu.Unlock()
			if o.size != 2 {
				t.Errorf("settled operation %d before its batch returned", o.id)
			}
			settled = append(settled, o)
		},
	})
	waitQueued := func(n int) {
		t.Helper()
		for i := 0; b.Waiting() != n; i++ {
			if i > 10000 {
				t.Fatalf("%d waiting, want %d", b.Waiting(), n)
			}
			time.Sleep(time.Millisecond)
		}
	}
	held := make(chan error, 1)
	go func() { held <- b.Do(context.Background(), &op{id: -1}) }()
	for b.InFlight() != 1 {
		time.Sleep(time.Millisecond)
	}
	sender := make(chan error, 1)
	go func() { sender <- b.Do(context.Background(), &op{id: 1}) }()
	waitQueued(1)
	ctx, cancel := context.WithCancel(context.Background())
	left := &op{id: 2}
	lerr := make(chan error, 1)
	go func() { lerr <- b.Do(ctx, left) }()
	waitQueued(2)
	close(release)
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	<-inMany
	cancel()
	if err := <-lerr; !errors.Is(err, context.Canceled) || errors.Is(err, ErrWithdrawn) {
		t.Fatalf("the caller that left: %v; want its cancellation, not ErrWithdrawn (its operation was out)", err)
	}
	mu.Lock()
	if len(abandoned) != 1 || abandoned[0] != left || len(settled) != 0 {
		t.Fatalf("when its caller left: abandoned %v, settled %v; want the operation abandoned, not settled", abandoned, settled)
	}
	mu.Unlock()
	close(manyRelease)
	if err := <-sender; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(settled) != 1 || settled[0] != left {
		t.Fatalf("after its batch returned: settled %v; want the abandoned operation", settled)
	}
}

// TestYieldTakesAlongWhatQueued: once a round trip has ended with operations waiting, an operation
// that could go out alone yields first, and what queued meanwhile leaves with it in one batch; the
// first such operation that finds nobody ends the yielding, and lone operations go out at once again.
func TestYieldTakesAlongWhatQueued(t *testing.T) {
	f := newFixture()
	close(f.release) // lone operations return at once
	yields := 0
	f.b.yield = func() { yields++ }
	if err := f.b.Do(context.Background(), &op{id: 1}); err != nil || yields != 0 {
		t.Fatalf("uncontended lone operation: %v, %d yields; want none", err, yields)
	}

	// Contention: operation 2 waits behind 1, which is held in One until 2 has queued.
	f.b.inFlight = 1 // as if a round trip were out
	e2 := make(chan error, 1)
	go func() { e2 <- f.b.Do(context.Background(), &op{id: 2}) }()
	f.waitQueued(t, 1)
	f.b.done() // the round trip ends with 2 waiting: 2 leaves, the batcher is contended
	if err := <-e2; err != nil {
		t.Fatal(err)
	}

	// Operation 3 could go out alone; while it yields, 4 queues; both leave together.
	e4 := make(chan error, 1)
	op3, op4 := &op{id: 3}, &op{id: 4}
	f.b.yield = func() {
		yields++
		go func() { e4 <- f.b.Do(context.Background(), op4) }()
		f.waitQueued(t, 1)
	}
	if err := f.b.Do(context.Background(), op3); err != nil {
		t.Fatal(err)
	}
	if yields == 0 {
		t.Fatalf("operation 3 went out alone (batch of %d) without yielding to let others join it", op3.size)
	}
	if err := <-e4; err != nil {
		t.Fatal(err)
	}
	if yields != 1 || op3.size != 2 || op4.size != 2 {
		t.Fatalf("%d yields, operations 3 and 4 in batches of %d and %d; want one yield, one batch of 2", yields, op3.size, op4.size)
	}

	// Operation 5 yields and finds nobody: it goes alone and the yielding ends; 6 does not yield.
	f.b.yield = func() { yields++ }
	op5, op6 := &op{id: 5}, &op{id: 6}
	for _, o := range []*op{op5, op6} {
		if err := f.b.Do(context.Background(), o); err != nil {
			t.Fatal(err)
		}
	}
	if yields != 2 || op5.size != 1 || op6.size != 1 {
		t.Errorf("%d yields (want 2: one by operation 5), batches of %d and %d (want 1 and 1)", yields, op5.size, op6.size)
	}
	if f.b.InFlight() != 0 || f.b.Waiting() != 0 {
		t.Errorf("after: %d in flight, %d waiting", f.b.InFlight(), f.b.Waiting())
	}
}
