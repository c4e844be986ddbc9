package background

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

func TestLimitDropsBeyondMax(t *testing.T) {
	l := &Limit{Max: 2}
	release := make(chan struct{})
	done := make(chan struct{}, 3)
	run := func(ctx context.Context) { <-release; done <- struct{}{} }
	started := 0
	for range 3 {
		if l.Go(context.Background(), time.Minute, run) {
			started++
		}
	}
	if started != 2 {
		t.Fatalf("%d of 3 started with Max 2", started)
	}
	close(release)
	<-done
	<-done
	for l.Running() != 0 { // the slots free up once the goroutines return
		time.Sleep(time.Millisecond)
	}
	if !l.Go(context.Background(), time.Minute, func(context.Context) {}) {
		t.Fatal("refused once the others ended")
	}
}

func TestGoOutlivesParentWithinItsBound(t *testing.T) {
	l := &Limit{Max: 1}
	parent, cancel := context.WithCancel(context.WithValue(context.Background(), "k", "v"))
	cancel()
	got := make(chan context.Context, 1)
	l.Go(parent, 50*time.Millisecond, func(ctx context.Context) { got <- ctx })
	ctx := <-got
	if ctx.Value("k") != "v" {
		t.Fatal("parent's values lost")
	}
	if _, ok := ctx.Deadline(); !ok {
		t.Fatal("no deadline")
	}
	<-ctx.Done() // ends after d, not with the cancelled parent
	if !Sleep(context.Background(), time.Millisecond) || Sleep(ctx, time.Hour) {
		t.Fatal("Sleep: waited d / returned at ctx's end, as it should not")
	}
}

func TestRetryUntilDone(t *testing.T) {
	l := &Limit{Max: 1}
	calls := make(chan int, 10)
	n := 0
	l.Retry(context.Background(), time.Minute, func(context.Context) bool {
		n++
		calls <- n
		return n == 3
	})
	for want := 1; want <= 3; want++ {
		if got := <-calls; got != want {
			t.Fatalf("call %d, want %d", got, want)
		}
	}
	for l.Running() != 0 { // it stops once f is done
		time.Sleep(time.Millisecond)
	}
	if len(calls) != 0 {
		t.Fatal("called again after done")
	}
}

func TestRetryEndsAfterD(t *testing.T) {
	l := &Limit{Max: 1}
	l.Retry(context.Background(), 50*time.Millisecond, func(context.Context) bool { return false })
	for l.Running() != 0 {
		time.Sleep(time.Millisecond)
	}
}

func TestWaitForTheGoroutines(t *testing.T) {
	l := &Limit{Max: 2}
	if err := l.Wait(context.Background()); err != nil {
		t.Fatalf("Wait with nothing running: %v", err)
	}
	release := make(chan struct{})
	var ended atomic.Int32
	for range 2 {
		l.Go(context.Background(), time.Minute, func(context.Context) { <-release; ended.Add(1) })
	}
	short, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := l.Wait(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait while they run: %v, want its context's deadline", err)
	}
	close(release)
	if err := l.Wait(context.Background()); err != nil || ended.Load() != 2 || l.Running() != 0 {
		t.Fatalf("Wait: %v with %d ended, %d running; want both ended", err, ended.Load(), l.Running())
	}
}
