package record

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/sqlcount"
)

const batchScope = "batch"

// claimRec is a new claim of key by owner, as the Guard writes it.
func claimRec(key, owner string) *idemkit.Record {
	now := time.Now()
	return &idemkit.Record{Scope: batchScope, Key: key, Status: idemkit.StatusProcessing, Fence: 1, Owner: owner,
		LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour), CreatedAt: now, UpdatedAt: now}
}

// holdRow makes the next write of key through s wait: a transaction on db inserts its record
// (insert) or locks it (an existing record), uncommitted. The returned func rolls it back.
func holdRow(t *testing.T, db *gorm.DB, s *Store, key string, insert bool) (release func()) {
	t.Helper()
	tx := db.Begin()
	must(t, tx.Error)
	if insert {
		must(t, s.WithTx(tx).Insert(ctxb, claimRec(key, "holder")))
	} else {
		_, err := s.WithTx(tx).Get(ctxb, batchScope, key)
		must(t, err)
	}
	var once sync.Once
	release = func() { once.Do(func() { must(t, tx.Rollback().Error) }) }
	t.Cleanup(func() { once.Do(func() { tx.Rollback() }) }) // a test that failed holding it
	return release
}

// waitAtServer waits until a statement on s's table runs in the server (other than the held
// transaction, which is idle): the write that waits for the held row.
func waitAtServer(t *testing.T, db *gorm.DB, s *Store) {
	t.Helper()
	for i := 0; ; i++ {
		var n int64
		query := "SELECT COUNT(*) FROM information_schema.processlist WHERE id <> CONNECTION_ID() AND info LIKE ?"
		if s.Dialect() == dialectPostgres {
			query = "SELECT COUNT(*) FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND state = 'active' AND query LIKE ?"
		}
		must(t, db.Raw(query, "%"+s.Table()+"%").Scan(&n).Error)
		if n > 0 {
			return
		}
		if i > 3000 {
			t.Fatal("no write reached the server")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitQueued waits until n writes wait in b's queue (a Batcher's Waiting).
func waitQueued(t *testing.T, waiting func() int, n int) {
	t.Helper()
	for i := 0; waiting() != n; i++ {
		if i > 3000 {
			t.Fatalf("%d writes queued, want %d", waiting(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// inBatch starts each call once the one before it waits in a batcher (waiting counts its waiters),
// runs release (which lets the call in flight, and so the batch, go), and returns the calls' results.
func inBatch[T any](t *testing.T, waiting func() int, release func(), calls ...func() T) []T {
	t.Helper()
	done := make([]chan T, len(calls))
	for i, call := range calls {
		done[i] = make(chan T, 1)
		go func() { done[i] <- call() }()
		waitQueued(t, waiting, i+1)
	}
	release()
	out := make([]T, len(calls))
	for i, c := range done {
		out[i] = <-c
	}
	return out
}

// TestBatchedClaims: claims that come while one is in flight leave together as one INSERT, and each
// gets what it would alone — its claim, or ErrExists for a key claimed before or by another claim of
// the same batch (the row is the first one's, with its owner).
func TestBatchedClaims(t *testing.T) {
	for _, b := range []backend{backends[0], multiBackend, backends[1]} {
		t.Run(b.name, func(t *testing.T) {
			db, n := countedDB(t, b, nil)
			s := newTable(t, db)
			if s.claims == nil {
				t.Fatalf("no group commit of claims on %s", b.name)
			}
			must(t, s.Insert(ctxb, claimRec("exists", "earlier")))

			run := func(recs ...*idemkit.Record) (errs []error, sent int64) {
				release := holdRow(t, db, s, "held-"+recs[0].Key, true)
				first := make(chan error, 1)
				go func() { first <- s.Insert(ctxb, claimRec("held-"+recs[0].Key, "first")) }()
				waitAtServer(t, db, s)
				calls := make([]func() error, len(recs))
				for i, r := range recs {
					calls[i] = func() error { return s.Insert(ctxb, r) }
				}
				var before sqlcount.Counts
				errs = inBatch(t, s.claims.Waiting, func() { before = n.Counts(); release(); must(t, <-first) }, calls...)
				return errs, n.Counts().Sub(before).Statements
			}

			errs, sent := run(claimRec("a", "oa"), claimRec("b", "ob"), claimRec("c", "oc"), claimRec("d", "od"))
			for i, err := range errs {
				if err != nil {
					t.Errorf("new claim %d: %v", i, err)
				}
			}
			if sent > 2 { // the batch's INSERT, and the held claim's when it counts on its return
				t.Errorf("4 new claims in a batch: %d statements, want one INSERT", sent)
			}

			errs, _ = run(claimRec("e", "oe"), claimRec("dup", "d1"), claimRec("dup", "d2"), claimRec("exists", "late"))
			if errs[0] != nil {
				t.Errorf("new claim beside duplicates: %v", errs[0])
			}
			if !errors.Is(errs[3], idemkit.ErrExists) {
				t.Errorf("claim of an existing record: %v, want ErrExists", errs[3])
			}
			won := ""
			for i, owner := range []string{"d1", "d2"} {
				switch err := errs[1+i]; {
				case err == nil && won == "":
					won = owner
				case err == nil:
					t.Error("both claims of one key in a batch won")
				case !errors.Is(err, idemkit.ErrExists):
					t.Errorf("claim %s: %v", owner, err)
				}
			}
			for key, owner := range map[string]string{"a": "oa", "d": "od", "e": "oe", "dup": won, "exists": "earlier"} {
				rec, err := s.Get(ctxb, batchScope, key)
				must(t, err)
				if owner == "" || rec.Owner != owner {
					t.Errorf("record %s: owner %q, want %q", key, rec.Owner, owner)
				}
			}
		})
	}
}

// TestBatchedFinishes: finishes that come while one is in flight leave together in one transaction,
// and each gets what it would alone: written, fenced (another owner), or confirmed unchanged.
func TestBatchedFinishes(t *testing.T) {
	db, n := countedDB(t, multiBackend, nil)
	s := newTable(t, db)
	recs := map[string]*idemkit.Record{}
	for _, k := range []string{"held", "a", "b", "same", "other"} {
		recs[k] = claimRec(k, "owner-"+k)
		must(t, s.Insert(ctxb, recs[k]))
	}
	finished := func(k string) *idemkit.Record {
		r := *recs[k]
		r.Status, r.Response, r.LeaseUntil, r.UpdatedAt = idemkit.StatusSucceeded, []byte("result of "+k), time.Time{}, time.Now()
		return &r
	}
	tx, err := s.BeginTx(ctxb) // the Store finds out once whether the pool takes multi-statement packets
	must(t, err)
	must(t, tx.Rollback())
	release := holdRow(t, db, s, "held", false)
	first := make(chan error, 1)
	go func() { first <- s.Update(ctxb, finished("held"), recs["held"].Version()) }()
	waitAtServer(t, db, s)
	if s.finishes == nil {
		t.Fatal("no group commit of finishes on a multi-statement pool")
	}
	// "other" was taken over (its lease ran out, say): its first claim's finish is fenced.
	taken := *recs["other"]
	taken.Fence, taken.Owner = 2, "new owner"
	must(t, s.Update(ctxb, &taken, recs["other"].Version()))
	writes := []struct {
		rec  *idemkit.Record
		prev idemkit.Version
		want error
	}{
		{finished("a"), recs["a"].Version(), nil},
		{finished("b"), recs["b"].Version(), nil},
		{recs["same"], recs["same"].Version(), nil}, // changes nothing: confirmed
		{finished("other"), recs["other"].Version(), idemkit.ErrFenced},
	}
	calls := make([]func() error, len(writes))
	for i, w := range writes {
		calls[i] = func() error { return s.Update(ctxb, w.rec, w.prev) }
	}
	var before sqlcount.Counts
	errs := inBatch(t, s.finishes.Waiting, func() { before = n.Counts(); release(); must(t, <-first) }, calls...)
	for i, w := range writes {
		if err := errs[i]; !errors.Is(err, w.want) || (w.want == nil && err != nil) {
			t.Errorf("finish %s: %v, want %v", w.rec.Key, err, w.want)
		}
	}
	// The held finish, the ROLLBACK releasing it, the batch's one packet (through its COMMIT), and the
	// confirmations of the two finishes that changed nothing ("same", "other"): 5 (8 alone).
	if d := n.Counts().Sub(before); d.Commits != 1 || d.Begins != 1 || d.RoundTrips != 5 {
		t.Errorf("4 finishes in a batch: %+v; want one transaction, 5 round trips", d)
	}
	for _, k := range []string{"held", "a", "b"} {
		rec, err := s.Get(ctxb, batchScope, k)
		must(t, err)
		if rec.Status != idemkit.StatusSucceeded || string(rec.Response) != "result of "+k {
			t.Errorf("record %s: %s %q", k, rec.Status, rec.Response)
		}
	}
	if rec, err := s.Get(ctxb, batchScope, "other"); err != nil || rec.Owner != "new owner" || rec.Status != idemkit.StatusProcessing {
		t.Errorf("fenced record: %v, %v", rec, err)
	}
	noOpenTransaction(t, db, maxConns)
}

// TestBatchFailureRunsEachAlone: when a batch statement fails (here a value the server refuses: text
// that is not UTF-8), nothing of it stays and each write runs alone: the others succeed, the bad one
// gets its own error. On MariaDB no connection is left inside a transaction.
func TestBatchFailureRunsEachAlone(t *testing.T) {
	for _, b := range []backend{multiBackend, backends[1]} {
		t.Run(b.name, func(t *testing.T) { batchFailureRunsEachAlone(t, b) })
	}
}

func batchFailureRunsEachAlone(t *testing.T, b backend) {
	db, _ := countedDB(t, b, nil)
	s := newTable(t, db)
	bad := func(r *idemkit.Record) *idemkit.Record { r.Error = "\xff\xfe not UTF-8"; return r }

	release := holdRow(t, db, s, "held", true)
	first := make(chan error, 1)
	go func() { first <- s.Insert(ctxb, claimRec("held", "first")) }()
	waitAtServer(t, db, s)
	claims := []*idemkit.Record{claimRec("a", "oa"), bad(claimRec("bad", "ob")), claimRec("c", "oc")}
	calls := make([]func() error, len(claims))
	for i, r := range claims {
		calls[i] = func() error { return s.Insert(ctxb, r) }
	}
	errs := inBatch(t, s.claims.Waiting, func() { release(); must(t, <-first) }, calls...)
	for i, r := range claims {
		switch err := errs[i]; {
		case r.Key == "bad" && !errors.Is(err, idemkit.ErrUnstorable):
			t.Errorf("bad claim: %v, want ErrUnstorable", err)
		case r.Key != "bad" && err != nil:
			t.Errorf("claim %s beside a bad one: %v", r.Key, err)
		}
	}
	if _, err := s.Get(ctxb, batchScope, "bad"); !errors.Is(err, idemkit.ErrNotFound) {
		t.Errorf("refused claim stored: %v", err)
	}

	recs := map[string]*idemkit.Record{}
	for _, k := range []string{"held2", "x", "y", "z"} {
		recs[k] = claimRec(k, "owner-"+k)
		must(t, s.Insert(ctxb, recs[k]))
	}
	finished := func(k string) *idemkit.Record {
		r := *recs[k]
		r.Status, r.Response = idemkit.StatusSucceeded, []byte(fmt.Sprint("result of ", k))
		return &r
	}
	release = holdRow(t, db, s, "held2", false)
	go func() { first <- s.Update(ctxb, finished("held2"), recs["held2"].Version()) }()
	waitAtServer(t, db, s)
	writes := []*idemkit.Record{finished("x"), bad(finished("y")), finished("z")}
	calls = make([]func() error, len(writes))
	for i, r := range writes {
		calls[i] = func() error { return s.Update(ctxb, r, recs[r.Key].Version()) }
	}
	errs = inBatch(t, s.finishes.Waiting, func() { release(); must(t, <-first) }, calls...)
	for i, r := range writes {
		err := errs[i]
		if r.Key == "y" {
			if !errors.Is(err, idemkit.ErrUnstorable) {
				t.Errorf("bad finish: %v, want ErrUnstorable", err)
			}
			continue
		}
		if err != nil {
			t.Errorf("finish %s beside a bad one: %v", r.Key, err)
		}
		rec, err := s.Get(ctxb, batchScope, r.Key)
		must(t, err)
		if rec.Status != idemkit.StatusSucceeded || string(rec.Response) != "result of "+r.Key {
			t.Errorf("record %s after its batch failed: %s %q", r.Key, rec.Status, rec.Response)
		}
	}
	if rec, err := s.Get(ctxb, batchScope, "y"); err != nil || rec.Status != idemkit.StatusProcessing {
		t.Errorf("record y after its finish was refused: %v, %v", rec, err)
	}
	if b.name == multiBackend.name {
		noOpenTransaction(t, db, maxConns)
	}
}

// TestBatchedReads: the reads before Tx-mode functions that come while one is in flight leave
// together as one SELECT, outside any transaction: each gets the record of its key (copies of one
// record for duplicates) or ErrNotFound and no transaction (the Guard then begins one).
func TestBatchedReads(t *testing.T) {
	db, n := countedDB(t, multiBackend, nil)
	s := newTable(t, db)
	done := claimRec("done", "o")
	done.Status, done.Response = idemkit.StatusSucceeded, []byte("stored")
	must(t, s.Insert(ctxb, done))
	tx, _, err := s.BeginTxGet(ctxb, batchScope, "warm") // finds out about multi-statement packets
	if !errors.Is(err, idemkit.ErrNotFound) || tx == nil {
		t.Fatalf("lone read of a new key: %v, %v", tx, err)
	}
	must(t, tx.Rollback())

	lock, err := db.DB()
	must(t, err)
	c, err := lock.Conn(ctxb)
	must(t, err)
	defer c.Close()
	_, err = c.ExecContext(ctxb, "LOCK TABLES "+s.q.quoted+" WRITE") // every read of the table waits
	must(t, err)
	type answer struct {
		tx  idemkit.TxStore
		rec *idemkit.Record
		err error
	}
	first := make(chan answer, 1)
	go func() {
		tx, rec, err := s.BeginTxGet(ctxb, batchScope, "first")
		first <- answer{tx, rec, err}
	}()
	waitAtServer(t, db, s)
	keys := []string{"new1", "dup", "done", "dup", "done", "new2"}
	calls := make([]func() answer, len(keys))
	for i, k := range keys {
		calls[i] = func() answer {
			tx, rec, err := s.BeginTxGet(ctxb, batchScope, k)
			return answer{tx, rec, err}
		}
	}
	var before sqlcount.Counts
	answers := inBatch(t, s.probes.Waiting, func() {
		before = n.Counts()
		_, err := c.ExecContext(ctxb, "UNLOCK TABLES")
		must(t, err)
	}, calls...)
	a := <-first
	if a.tx == nil || !errors.Is(a.err, idemkit.ErrNotFound) {
		t.Fatalf("lone read: %v, %v", a.tx, a.err)
	}
	must(t, a.tx.Rollback())
	var recs []*idemkit.Record
	for i, k := range keys {
		a := answers[i]
		if a.tx != nil {
			t.Errorf("read %s in a batch: a transaction", k)
			must(t, a.tx.Rollback())
		}
		if k != "done" {
			if !errors.Is(a.err, idemkit.ErrNotFound) {
				t.Errorf("read %s: %v, want ErrNotFound", k, a.err)
			}
			continue
		}
		if a.err != nil || a.rec == nil || a.rec.Status != idemkit.StatusSucceeded || string(a.rec.Response) != "stored" {
			t.Errorf("read of a finished record: %+v, %v", a.rec, a.err)
		}
		recs = append(recs, a.rec)
	}
	if len(recs) != 2 || recs[0] == recs[1] {
		t.Errorf("two reads of one record share it: %p %p", recs[0], recs[1])
	}
	// The lone read's packet and its ROLLBACK, and one SELECT for the six others.
	if d := n.Counts().Sub(before); d.Statements > 3 {
		t.Errorf("6 reads in a batch: %+v, want one SELECT", d)
	}
	must(t, c.Close())
	noOpenTransaction(t, db, maxConns)
}
