package idemkit_test

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/memory"
)

// slowFinishStore is a memory Store whose first finishes fail, as writes a database was too slow to
// answer within FinishTimeout while it restarted.
type slowFinishStore struct {
	*memory.Store
	failing atomic.Int32 // finishes left to fail
}

func (s *slowFinishStore) Update(ctx context.Context, r *idemkit.Record, prev idemkit.Version) error {
	if r.Status != idemkit.StatusProcessing && s.failing.Add(-1) >= 0 {
		return errors.New("i/o timeout")
	}
	return s.Store.Update(ctx, r, prev)
}

// TestWaitLetsAGracefulShutdownWriteTheOutcome: a finish whose write failed is written again in the
// background, so that the retry of a key whose work was done replays its outcome instead of running
// it again. But a program that stopped gracefully (its server drained, its calls answered) exited at
// once: nothing could wait for those writes, the record stayed PROCESSING and, once its lease ran
// out, the retry ran the work a second time. Guard.Wait waits for the Guard's background work.
func TestWaitLetsAGracefulShutdownWriteTheOutcome(t *testing.T) {
	st := &slowFinishStore{Store: memory.NewStore()}
	st.failing.Store(3) // written again after 10, 20 and 40 ms
	g, err := idemkit.New(st, &idemkit.Options{Lease: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	c := idemkit.Call{Scope: "orders", Key: "k"}
	if _, err := g.Do(context.Background(), c, func(context.Context) ([]byte, error) { return []byte("order-1"), nil }); !errors.Is(err, idemkit.ErrStoreUnavailable) {
		t.Fatalf("call: %v, want ErrStoreUnavailable (its finish failed)", err)
	}
	// The program shuts down: the last thing it does with the Guard.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.Wait(ctx); err != nil {
		t.Fatalf("Wait: %v", err)
	}
	rec, err := st.Get(context.Background(), c.Scope, c.Key)
	if err != nil || rec.Status != idemkit.StatusSucceeded || string(rec.Response) != "order-1" {
		t.Fatalf("record once Wait returned: %+v, %v; want SUCCEEDED with the result", rec, err)
	}

	// Wait returns at its context's end when the background work does not end before.
	st.failing.Store(1 << 30) // the store never comes back
	if _, err := g.Do(context.Background(), idemkit.Call{Scope: "orders", Key: "k2"}, func(context.Context) ([]byte, error) { return nil, nil }); !errors.Is(err, idemkit.ErrStoreUnavailable) {
		t.Fatalf("second call: %v, want ErrStoreUnavailable", err)
	}
	short, cancel2 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel2()
	if err := g.Wait(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait with the store down: %v, want the context's deadline", err)
	}
}

// failingStore fails every write, as a database that went away; reads find nothing.
type failingStore struct{ *memory.Store }

func (failingStore) Insert(context.Context, *idemkit.Record) error {
	return errors.New("connection refused")
}
func (failingStore) Update(context.Context, *idemkit.Record, idemkit.Version) error {
	return errors.New("connection refused")
}

// TestWaitLeavesNoGoroutines: a storm of calls, many of whose callers leave at once, on a Store that
// fails every write and on one that works, with a Locker and the watchdog: once Wait returned, every
// goroutine the Guard started has ended.
func TestWaitLeavesNoGoroutines(t *testing.T) {
	base := runtime.NumGoroutine()
	for _, st := range []idemkit.Store{failingStore{memory.NewStore()}, &slowFinishStore{Store: memory.NewStore()}} {
		g, err := idemkit.New(st, &idemkit.Options{Locker: memory.NewLocker(nil), Watchdog: true, Lease: 300 * time.Millisecond,
			FinishTimeout: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if s, ok := st.(*slowFinishStore); ok {
			s.failing.Store(200)
		}
		var wg sync.WaitGroup
		for i := range 600 {
			wg.Go(func() {
				ctx, cancel := context.WithCancel(context.Background())
				if i%2 == 0 {
					cancel() // the caller left before the call
				}
				defer cancel()
				c := idemkit.Call{Scope: "s", Key: strconv.Itoa(i % 100)}
				switch i % 3 {
				case 0:
					_, _ = g.Do(ctx, c, func(context.Context) ([]byte, error) { return []byte("v"), nil })
				case 1:
					_ = g.Mark(ctx, c, func(context.Context) error { return errors.New("failed") })
				case 2:
					_, _ = g.Do(ctx, c, func(context.Context) ([]byte, error) { cancel(); return nil, nil })
				}
			})
		}
		wg.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if err := g.Wait(ctx); err != nil {
			t.Fatalf("Wait: %v", err)
		}
		cancel()
	}
	// Wait returns once the last of them said it ended: give them a moment to return.
	for deadline := time.Now().Add(5 * time.Second); runtime.NumGoroutine() > base && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > base {
		buf := make([]byte, 1<<16)
		t.Fatalf("%d goroutines once Wait returned, %d before the calls:\n%s", n, base, buf[:runtime.Stack(buf, true)])
	}
}
