package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
)

// storm is a duplicate storm over several "processes" (one Guard each) with a fault injected while it
// runs. Keys are submitted Dup times at once, each copy through another process; a client retries a
// copy (through the next process, as a load balancer would) after an error the spec calls retryable,
// until it gets an answer. Keys keep coming until the fault has finished and After more keys have
// been answered, so the whole fault happens under load.
type storm struct {
	// Procs is the number of processes the copies are spread over.
	Procs int
	// Dup is the number of concurrent copies of each key.
	Dup int
	// Workers is the number of keys in flight at once.
	Workers int
	// Before is how many keys are answered before the fault starts; After how many are submitted
	// after it finished.
	Before, After int
	// Do submits key through process p and returns the answer's value: the one stored for the key,
	// whether fresh or replayed.
	Do func(ctx context.Context, p int, key string) (string, error)
	// Retry classifies an error of Do: a non-empty class means the client retries; "" means the
	// error is final and fails the test.
	Retry func(err error) string
	// Fault runs once, in its own goroutine, after Before keys; nil for none.
	Fault func(ctx context.Context) error
	// Deadline bounds the whole storm. Defaults to 3 minutes.
	Deadline time.Duration
}

// stormResult is what the clients saw.
type stormResult struct {
	Keys     int
	Copies   int
	Attempts int64
	Retries  map[string]int // by class
	Answers  map[string]string
	// Mismatched counts copies answered with another value than an earlier copy of their key.
	Mismatched int
	FaultTook  time.Duration
	Took       time.Duration
}

func (r *stormResult) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d keys × copies = %d submissions, %d attempts in %s", r.Keys, r.Copies, r.Attempts, r.Took.Round(time.Millisecond))
	if r.FaultTook > 0 {
		fmt.Fprintf(&b, "; fault took %s", r.FaultTook.Round(time.Millisecond))
	}
	for _, k := range slices.Sorted(maps.Keys(r.Retries)) {
		fmt.Fprintf(&b, "; %d retried after %s", r.Retries[k], k)
	}
	return b.String()
}

// run runs the storm and returns what the clients saw, with the copies of a key answered
// differently counted in Mismatched (check them with [stormResult.wantConsistent]); a copy that ends
// with an error the spec does not retry fails t. The caller checks the executions against its own
// (independent) record of them.
func (s storm) run(t *testing.T, prefix string) *stormResult {
	t.Helper()
	deadline := s.Deadline
	if deadline == 0 {
		deadline = 3 * time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()

	res := &stormResult{Retries: map[string]int{}, Answers: map[string]string{}}
	var (
		mu        sync.Mutex
		answered  atomic.Int64
		attempts  atomic.Int64
		faultDone = make(chan struct{})
		faultErr  error
		afterDone atomic.Int64 // keys submitted after the fault finished
		failures  atomic.Int64
	)
	if s.Fault == nil {
		close(faultDone)
	}
	keys := make(chan string)
	start := time.Now()
	go func() { // the producer
		defer close(keys)
		for i := 0; ; i++ {
			select {
			case <-faultDone:
				if afterDone.Add(1) > int64(s.After) {
					return
				}
			default:
			}
			select {
			case keys <- fmt.Sprintf("%s-%d", prefix, i):
			case <-ctx.Done():
				return
			}
		}
	}()
	var faultOnce sync.Once
	startFault := func() {
		faultOnce.Do(func() {
			if s.Fault == nil {
				return
			}
			go func() {
				defer close(faultDone)
				t0 := time.Now()
				faultErr = s.Fault(ctx)
				res.FaultTook = time.Since(t0)
			}()
		})
	}
	if s.Before == 0 {
		startFault()
	}

	submit := func(key string, p int) {
		for n := 0; ; n++ {
			attempts.Add(1)
			v, err := s.Do(ctx, p, key)
			if err == nil {
				mu.Lock()
				defer mu.Unlock()
				if prev, ok := res.Answers[key]; ok && prev != v {
					res.Mismatched++
					if res.Mismatched <= 5 {
						t.Logf("key %s: answered %q and %q", key, prev, v)
					}
				}
				res.Answers[key] = v
				return
			}
			class := s.Retry(err)
			if class == "" || ctx.Err() != nil {
				failures.Add(1)
				t.Errorf("key %s via process %d: %v", key, p, err)
				return
			}
			mu.Lock()
			res.Retries[class]++
			mu.Unlock()
			p = (p + 1) % s.Procs
			time.Sleep(time.Duration(5+rand.IntN(20)) * time.Millisecond)
		}
	}

	var wg sync.WaitGroup
	for range s.Workers {
		wg.Go(func() {
			for key := range keys {
				if failures.Load() > 10 {
					continue // enough said: drain
				}
				var kw sync.WaitGroup
				first := rand.IntN(s.Procs)
				for c := range s.Dup {
					kw.Go(func() { submit(key, (first+c)%s.Procs) })
				}
				kw.Wait()
				if answered.Add(1) == int64(s.Before) {
					startFault()
				}
			}
		})
	}
	wg.Wait()
	startFault() // in case there were fewer keys than Before (a failing run)
	<-faultDone
	if faultErr != nil {
		t.Errorf("fault: %v", faultErr)
	}
	res.Took = time.Since(start)
	res.Keys = len(res.Answers)
	res.Copies = res.Keys * s.Dup
	res.Attempts = attempts.Load()
	return res
}

// classify names the usual retryable errors of a Guard.
func classify(err error) string {
	switch {
	case errors.Is(err, idemkit.ErrInFlight):
		return "in flight"
	case errors.Is(err, idemkit.ErrLockUnavailable):
		return "lock unavailable"
	case errors.Is(err, idemkit.ErrStoreUnavailable):
		return "store unavailable"
	}
	return ""
}

// wantConsistent fails t when copies of a key were answered differently.
func (r *stormResult) wantConsistent(t *testing.T) {
	t.Helper()
	if r.Mismatched > 0 {
		t.Errorf("%d copies were answered differently from an earlier copy of their key", r.Mismatched)
	}
}

// runViolations counts the keys that ran other than exactly once, and the answered keys that never
// ran, reporting the first few on t.
func runViolations(t *testing.T, runs map[string]int, answers map[string]string) int {
	t.Helper()
	v := 0
	for key, n := range runs {
		if n != 1 {
			v++
			if v <= 10 {
				t.Logf("key %s ran %d times", key, n)
			}
		}
	}
	for key := range answers {
		if runs[key] == 0 {
			v++
			if v <= 10 {
				t.Logf("key %s was answered but never ran", key)
			}
		}
	}
	return v
}
