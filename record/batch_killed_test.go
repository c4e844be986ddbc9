package record

import (
	"bytes"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testsvc"
)

// TestBatchKilledAfterCommit: a finish batch whose connection is killed right after its commit
// (MariaDB's error 1927 in place of the COMMIT's answer, PostgreSQL's FATAL 57P01 before
// ReadyForQuery, as a KILL CONNECTION or pg_terminate_backend caught after the commit sends them) looks
// refused, and each finish runs again alone. Each then finds its own write in place (its fence and
// owner, its status, result and times) and succeeds, rather than reporting its claim fenced although its
// result is stored. A finish that was in fact fenced still is.
func TestBatchKilledAfterCommit(t *testing.T) {
	for _, b := range []backend{multiBackend, backends[1]} {
		t.Run(b.name, func(t *testing.T) {
			var armed atomic.Bool
			dialect := dialectMySQL
			if b.name == "PostgreSQL" {
				dialect = dialectPostgres
			}
			p := startFaultProxy(t, serverAddr(t, b), killAfterCommit(dialect, &armed))
			db := proxiedDB(t, b, p)
			table := testsvc.Name("t_rec_")
			s, err := New(db, &Options{Table: table})
			must(t, err)
			testsvc.DropTable(t, db, table)
			must(t, s.CreateTable(ctxb))
			recs := map[string]*idemkit.Record{}
			for _, k := range []string{"held", "a", "b", "other"} {
				recs[k] = claimRec(k, "owner-"+k)
				must(t, s.Insert(ctxb, recs[k]))
			}
			finished := func(k string) *idemkit.Record {
				r := *recs[k]
				r.Status, r.Response, r.Error, r.LeaseUntil, r.UpdatedAt = idemkit.StatusSucceeded, []byte("result of "+k), "", time.Time{}, time.Now()
				return &r
			}
			// "other" was taken over (its lease ran out, say): its first claim's finish is fenced.
			taken := *recs["other"]
			taken.Fence, taken.Owner = 2, "new owner"
			must(t, s.Update(ctxb, &taken, recs["other"].Version()))

			release := holdRow(t, db, s, "held", false)
			first := make(chan error, 1)
			go func() { first <- s.Update(ctxb, finished("held"), recs["held"].Version()) }()
			waitAtServer(t, db, s)
			writes := map[string]*idemkit.Record{"a": finished("a"), "b": finished("b"), "other": finished("other")}
			order := []string{"a", "b", "other"}
			calls := make([]func() error, len(order))
			for i, k := range order {
				calls[i] = func() error { return s.Update(ctxb, writes[k], recs[k].Version()) }
			}
			errs := inBatch(t, s.finishes.Waiting, func() { armed.Store(true); release(); must(t, <-first) }, calls...)
			if armed.Load() {
				t.Fatal("the batch's connection was not killed after its commit")
			}
			for i, k := range order {
				want := error(nil)
				if k == "other" {
					want = idemkit.ErrFenced
				}
				if !errors.Is(errs[i], want) {
					t.Errorf("finish of %s: %v, want %v", k, errs[i], want)
				}
			}
			for _, k := range []string{"a", "b"} {
				got, err := s.Get(ctxb, batchScope, k)
				must(t, err)
				if got.Status != idemkit.StatusSucceeded || !bytes.Equal(got.Response, writes[k].Response) || got.Fence != 1 {
					t.Errorf("record of %s: %s %q fence %d, want its finish", k, got.Status, got.Response, got.Fence)
				}
			}
		})
	}
}
