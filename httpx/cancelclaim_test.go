package httpx

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/record"
)

// TestCancelledClaimFreesKey: a request whose context ends while its claim INSERT waits on MariaDB (a
// row lock held by another transaction, as under contention) never runs the handler. The INSERT
// still commits on the server once the lock is free: the Guard releases that claim, so a retry runs
// the handler — it got 409 in-flight until the claim's lease (30 s) ran out (found by a defect hunt).
func TestCancelledClaimFreesKey(t *testing.T) {
	bd := setup(t, realBackend, nil, nil)
	table := bd.store.Store.(*record.Store).Table()
	var calls atomic.Int64
	h := bd.mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.WriteHeader(201)
	}))

	// Another transaction holds the row lock of the key's primary key (an uncommitted insert).
	sqlDB, _ := testsvc.MySQL(t, nil).DB()
	blocker, err := sqlDB.BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := blocker.Exec("INSERT INTO "+table+" (scope, idem_key, status, error) VALUES (?, ?, 'FAILED', '')", "POST /orders", "k1"); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req("POST", "/orders", "k1", `{"a":1}`).WithContext(ctx))
	t.Logf("first (client gave up): %d %s", rec.Code, rec.Body.String())
	_ = blocker.Rollback()

	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		rec = httptest.NewRecorder()
		h.ServeHTTP(rec, req("POST", "/orders", "k1", `{"a":1}`))
		if rec.Code != http.StatusConflict {
			break
		}
	}
	if rec.Code != 201 || calls.Load() != 1 {
		t.Fatalf("after a cancelled request that never ran the handler, retries got %d (handler ran %d times); want the handler to run", rec.Code, calls.Load())
	}
}
