package record

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testsvc"
)

// TestBatchOfCallerWithoutDeadlineIsBounded: on a connection that went silent (a server that stops
// answering, played by a proxy that forwards nothing), a finish batch one of whose callers has no
// deadline runs for Options.BatchTimeout, not until TCP gives up on the connection; a caller with a
// deadline out in that batch returns at its own; a caller without one whose finish goes out alone is
// bounded the same way, as it holds up every finish queued behind it.
func TestBatchOfCallerWithoutDeadlineIsBounded(t *testing.T) {
	for _, b := range []backend{multiBackend, backends[1]} {
		t.Run(b.name, func(t *testing.T) {
			p := startFaultProxy(t, serverAddr(t, b), nil)
			db := proxiedDB(t, b, p)
			table := testsvc.Name("t_rec_")
			s, err := New(db, &Options{Table: table, BatchTimeout: 2 * time.Second})
			must(t, err)
			testsvc.DropTable(t, db, table)
			must(t, s.CreateTable(ctxb))
			t.Cleanup(p.Drop) // before the table is dropped through it, should the test fail frozen
			recs := map[string]*idemkit.Record{}
			for _, k := range []string{"first", "nodeadline", "deadline", "alone"} {
				recs[k] = claimRec(k, "owner-"+k)
				must(t, s.Insert(ctxb, recs[k]))
			}
			finish := func(ctx context.Context, k string) chan error {
				done := make(chan error, 1)
				go func() {
					r := *recs[k]
					r.Status, r.Response, r.UpdatedAt = idemkit.StatusSucceeded, []byte("result of "+k), time.Now()
					done <- s.Update(ctx, &r, recs[k].Version())
				}()
				return done
			}
			wait := func(what string, done chan error) error {
				t.Helper()
				select {
				case err := <-done:
					return err
				case <-time.After(30 * time.Second):
					t.Fatalf("%s: still waiting after 30s on a silent connection", what)
					return nil
				}
			}

			p.Freeze()
			// A caller without a deadline whose finish goes out alone.
			if err := wait("a lone finish without a deadline", finish(ctxb, "alone")); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("lone finish without a deadline: %v, want the bound's deadline", err)
			}

			// "first" goes out alone and holds the others until its caller's deadline; then
			// "nodeadline" (no deadline) sends the batch it leaves in with "deadline".
			firstCtx, cancel := context.WithTimeout(ctxb, time.Second)
			defer cancel()
			first := finish(firstCtx, "first")
			for i := 0; s.finishes.InFlight() == 0; i++ {
				if i > 3000 {
					t.Fatal("the first finish did not go out")
				}
				time.Sleep(time.Millisecond)
			}
			noDeadline := finish(ctxb, "nodeadline")
			waitQueued(t, s.finishes.Waiting, 1)
			deadlineCtx, cancel2 := context.WithTimeout(ctxb, 3*time.Second)
			defer cancel2()
			deadline := finish(deadlineCtx, "deadline")
			waitQueued(t, s.finishes.Waiting, 2)
			if err := wait("first", first); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("first finish: %v, want its deadline", err)
			}
			if err := wait("a caller with a deadline in the batch", deadline); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("finish with a deadline: %v, want its deadline", err)
			}
			if err := wait("the batch of a caller without a deadline", noDeadline); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("finish without a deadline: %v, want the bound's deadline", err)
			}

			// The server answers again (the silent connections dropped): the finishes, none of which
			// reached it, go through.
			p.Drop()
			for _, k := range []string{"alone", "first", "nodeadline", "deadline"} {
				if err := <-finish(ctxb, k); err != nil {
					t.Fatalf("finish of %s after the thaw: %v", k, err)
				}
			}
		})
	}
}
