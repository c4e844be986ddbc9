package idemkit_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testsvc"
)

// lostClaimReplyStore is a Store whose next Insert, once armed, is written but answers an error, as
// when the connection breaks after the server ran the statement: the claim landed, and its caller,
// still waiting, hears of a failure.
type lostClaimReplyStore struct {
	idemkit.Store
	armed, armedTakeover atomic.Bool
}

// Update loses the reply of the next takeover (a write at another fence), once armed.
func (s *lostClaimReplyStore) Update(ctx context.Context, rec *idemkit.Record, prev idemkit.Version) error {
	err := s.Store.Update(ctx, rec, prev)
	if err == nil && rec.Fence != prev.Fence && s.armedTakeover.CompareAndSwap(true, false) {
		return errConnReset
	}
	return err
}

var (
	errConnReset = errors.New("read tcp 127.0.0.1:50001->127.0.0.1:3306: read: connection reset by peer")
	errUpstream  = idemkit.Retryable(errors.New("upstream timeout"))
)

func (s *lostClaimReplyStore) Insert(ctx context.Context, rec *idemkit.Record) error {
	err := s.Store.Insert(ctx, rec)
	if err == nil && s.armed.CompareAndSwap(true, false) {
		return errConnReset
	}
	return err
}

// TestClaimWhoseReplyWasLostIsReleased: a claim the database wrote but whose reply was lost while
// the caller still waited (a connection reset after the INSERT ran) was left standing: the call
// answered ErrStoreUnavailable without running its function, and nothing followed it up. For Mark
// mode the claim is a mark, SUCCEEDED with no lease: every retry got ErrDuplicate — "done" — for the
// record's whole TTL (a day by default), and the function never ran; an Execute-mode retry met
// ErrInFlight for the whole Lease. The claim is now released as an abandoned one is (finished FAILED,
// fenced on its own token), so a retry runs; so is a takeover whose reply was lost (memory and MariaDB).
func TestClaimWhoseReplyWasLostIsReleased(t *testing.T) {
	for name, base := range lateClaimStores(t) {
		for _, c := range []struct{ mode, write string }{{"Mark", "insert"}, {"Do", "insert"}, {"Mark", "takeover"}, {"Do", "takeover"}} {
			mode := c.mode
			t.Run(name+"/"+mode+"/"+c.write, func(t *testing.T) {
				st := &lostClaimReplyStore{Store: base}
				g, err := idemkit.New(st, nil)
				if err != nil {
					t.Fatal(err)
				}
				call := idemkit.Call{Scope: "s", Key: testsvc.Name("lost-")}
				var runs atomic.Int32
				run := func() error {
					if mode == "Mark" {
						return g.Mark(ctxb, call, func(context.Context) error { runs.Add(1); return nil })
					}
					_, err := g.Do(ctxb, call, func(context.Context) ([]byte, error) { runs.Add(1); return []byte("v"), nil })
					return err
				}
				if c.write == "takeover" {
					// A first attempt that failed: the retry takes its record over.
					var err error
					if mode == "Mark" {
						err = g.Mark(ctxb, call, func(context.Context) error { return errUpstream })
					} else {
						_, err = g.Do(ctxb, call, func(context.Context) ([]byte, error) { return nil, errUpstream })
					}
					if !errors.Is(err, errUpstream) {
						t.Fatal(err)
					}
					st.armedTakeover.Store(true)
				} else {
					st.armed.Store(true)
				}
				if err := run(); !errors.Is(err, idemkit.ErrStoreUnavailable) || runs.Load() != 0 {
					t.Fatalf("claim with a lost reply: %v after %d runs, want ErrStoreUnavailable and no run", err, runs.Load())
				}
				deadline := time.Now().Add(3 * time.Second)
				for {
					err := run()
					if err == nil && runs.Load() == 1 {
						break
					}
					if err == nil || time.Now().After(deadline) {
						rec, gerr := g.Get(ctxb, call.Scope, call.Key)
						t.Fatalf("retry: %v after %d runs (record %+v, %v); want the function run once", err, runs.Load(), rec, gerr)
					}
					time.Sleep(20 * time.Millisecond)
				}
			})
		}
	}
}
