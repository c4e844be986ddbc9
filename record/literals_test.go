package record

import (
	"bytes"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/idemkit/idemkit"
)

// TestLoneLiteralsOneAllocation: a lone claim's INSERT and a lone finish's UPDATE are each built in
// one allocation (their sizes are computed first), and carry no arguments.
func TestLoneLiteralsOneAllocation(t *testing.T) {
	q := buildQueries(dialectMySQL, "", DefaultTable)
	now := time.Now()
	rec := &idemkit.Record{Scope: "POST /orders", Key: "0f8fad5b-d9cb-469f-a165-70867728950e", Status: idemkit.StatusSucceeded,
		Fence: 123456789, Owner: strings.Repeat("o", maxOwner), Fingerprint: strings.Repeat("f", maxText), GID: "gid", BranchID: "01",
		Response: []byte(`{"order":42,"status":"paid"}`), Error: "an error text with é", LeaseUntil: now, ExpiresAt: now.Add(time.Hour),
		CreatedAt: now, UpdatedAt: now}
	prev := idemkit.Version{Fence: rec.Fence, Owner: rec.Owner, Status: idemkit.StatusProcessing}
	if n := testing.AllocsPerRun(100, func() { _ = q.insertOne(rec, insertRowsSfx) }); n != 1 {
		t.Errorf("insertOne: %v allocations, want 1", n)
	}
	if n := testing.AllocsPerRun(100, func() { _ = q.finishOne(rec, prev) }); n != 1 {
		t.Errorf("finishOne: %v allocations, want 1", n)
	}
}

// FuzzLoneLiterals: whatever the scope, key, result and texts, a lone claim (outside a transaction
// and in a caller's) and a lone finish, sent with their values as literals, store them byte for byte
// as read back with bound parameters — or, for text that is not UTF-8, are refused as unstorable and
// change nothing. A duplicate claim is ErrExists; a finish over a version no longer there, ErrFenced.
func FuzzLoneLiterals(f *testing.F) {
	f.Add("scope", "key", []byte("result"), "")
	f.Add("s'c\\", "k\"ey;'); COMMIT; --", []byte{0, 0xff, '\'', ';'}, "l'erreur é \\")
	f.Add("x", "\xff\xfe", []byte{}, "\xff")
	f.Add("POST /a", "k", []byte(strings.Repeat("r", 4096)), strings.Repeat("é", 100))
	db, counter := countedDB(f, backends[0], nil) // MariaDB, server-side prepared statements
	s := newTable(f, db)
	sqlDB, err := db.DB()
	must(f, err)
	var n atomic.Int64
	f.Fuzz(func(t *testing.T, scope, key string, result []byte, text string) {
		key = fuzzInput(t, &n, scope, key, result, text)
		gid := text
		if len(gid) > maxText {
			gid = gid[:maxText]
		}
		valid := utf8.ValidString(text) && utf8.ValidString(gid)
		now := time.UnixMilli(1_700_000_000_000)
		claim := &idemkit.Record{Scope: scope, Key: key, Status: idemkit.StatusProcessing, Fence: 1, Owner: "o1",
			GID: gid, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour), CreatedAt: now, UpdatedAt: now}

		// A claim outside any transaction.
		var err error
		d := delta(counter, func() { err = s.Insert(ctxb, claim) })
		if !valid {
			if !errors.Is(err, idemkit.ErrUnstorable) {
				t.Fatalf("gid %q: %v, want ErrUnstorable", gid, err)
			}
			if _, err := s.Get(ctxb, scope, key); !errors.Is(err, idemkit.ErrNotFound) {
				t.Fatalf("refused claim stored: %v", err)
			}
			return
		}
		must(t, err)
		if d.Prepares != 0 || d.Statements != 1 {
			t.Fatalf("lone claim: %+v, want one statement", d)
		}
		if err := s.Insert(ctxb, claim); !errors.Is(err, idemkit.ErrExists) {
			t.Fatalf("second claim: %v, want ErrExists", err)
		}

		// Its finish, with the result and the text.
		fin := *claim
		fin.Status, fin.Response, fin.Error, fin.UpdatedAt = idemkit.StatusSucceeded, result, text, now.Add(time.Second)
		must(t, s.Update(ctxb, &fin, claim.Version()))
		got, err := s.Get(ctxb, scope, key)
		must(t, err)
		if got.Scope != scope || got.Key != key || got.GID != gid || got.Owner != "o1" || got.Fence != 1 ||
			got.Status != idemkit.StatusSucceeded || !bytes.Equal(got.Response, result) && len(result)+len(got.Response) > 0 ||
			got.Error != text || !got.UpdatedAt.Equal(fin.UpdatedAt) {
			t.Fatalf("stored %q/%q %q %q, read back %+v", scope, key, result, text, got)
		}
		// A finish over a version that is no longer there is fenced.
		if err := s.Update(ctxb, &fin, claim.Version()); !errors.Is(err, idemkit.ErrFenced) {
			t.Fatalf("finish over a finished record: %v, want ErrFenced", err)
		}

		// A mark in a caller's transaction, committed.
		tx, err := sqlDB.BeginTx(ctxb, nil)
		must(t, err)
		mark := *claim
		mark.Key = key[:len(key)-len(key)/2] + "#mark"
		mark.Status, mark.Error = idemkit.StatusSucceeded, text
		if err := s.WithSQLTx(tx).Insert(ctxb, &mark); err != nil {
			_ = tx.Rollback()
			t.Fatalf("mark in a transaction: %v", err)
		}
		must(t, tx.Commit())
		got, err = s.Get(ctxb, scope, mark.Key)
		must(t, err)
		if got.Status != idemkit.StatusSucceeded || got.Error != text || got.GID != gid {
			t.Fatalf("mark stored %q, read back %+v", text, got)
		}
	})
}
