package record

import (
	"testing"
	"time"

	"github.com/idemkit/idemkit"
)

// TestFinishesNotQueuedWithoutMultiStatements: on a pool whose DSN sets multiStatements but whose
// server turned out not to take multi-statement transactions (Galera, where the Store finds
// multiOff; or a proxy that refuses a second statement), a batch of finishes cannot be one packet: its
// sender ran every finish alone, one after the other, while every other finish of the Store waited
// in the queue behind it — one finish per round trip for the whole Store, and a finish of one key
// stuck behind another key's row lock. Finishes now leave on their own there, as claims' reads do.
func TestFinishesNotQueuedWithoutMultiStatements(t *testing.T) {
	db, _ := countedDB(t, multiBackend, nil)
	s := newTable(t, db)
	if s.finishes == nil || s.multi == nil {
		t.Fatal("no group commit of finishes on a multi-statement pool")
	}
	s.multi.Store(multiOff) // what a Galera node, or a proxy refusing "DO 1; DO 1", makes the Store find
	recs := map[string]*idemkit.Record{}
	for _, k := range []string{"held", "free"} {
		recs[k] = claimRec(k, "owner-"+k)
		must(t, s.Insert(ctxb, recs[k]))
	}
	finished := func(k string) *idemkit.Record {
		r := *recs[k]
		r.Status, r.Response, r.LeaseUntil, r.UpdatedAt = idemkit.StatusSucceeded, []byte("result of "+k), time.Time{}, time.Now()
		return &r
	}
	release := holdRow(t, db, s, "held", false)
	first := make(chan error, 1)
	go func() { first <- s.Update(ctxb, finished("held"), recs["held"].Version()) }()
	waitAtServer(t, db, s)
	free := make(chan error, 1)
	go func() { free <- s.Update(ctxb, finished("free"), recs["free"].Version()) }()
	for {
		select {
		case err := <-free:
			must(t, err)
		default:
			if s.finishes.Waiting() > 0 {
				release()
				must(t, <-first)
				must(t, <-free)
				t.Fatal("the finish of an unrelated key waited in the queue behind a finish held by a row lock")
			}
			time.Sleep(5 * time.Millisecond)
			continue
		}
		break
	}
	release()
	must(t, <-first)
	for _, k := range []string{"held", "free"} {
		rec, err := s.Get(ctxb, batchScope, k)
		must(t, err)
		if rec.Status != idemkit.StatusSucceeded || string(rec.Response) != "result of "+k {
			t.Errorf("record %s: %s %q", k, rec.Status, rec.Response)
		}
	}
}
