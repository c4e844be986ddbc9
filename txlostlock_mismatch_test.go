package idemkit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/memory"
	"github.com/idemkit/idemkit/record"
)

// TestTxRetryAfterALostLockIsNoMismatch: a Tx-mode attempt A1 (payload A) outlived LockTTL without a
// watchdog; the key, reused with payload B, was locked by B's attempt; A's retry A2 met B's lock,
// read no record (A1 has not committed: a Tx-mode record is written at commit) and was answered
// ErrPayloadMismatch — HTTP 422, final — for its own payload. A1 then committed first: the key is
// A's, B got the mismatch, and A's client had been told its request was refused. No record said so:
// in the Tx modes, no record tells nothing about the attempts in flight, A1 or the holder. Such a
// call is in flight now (retryable); only a record binding the key to another payload is a mismatch.
func TestTxRetryAfterALostLockIsNoMismatch(t *testing.T) {
	const lockTTL = 100 * time.Millisecond
	backends := map[string]func(t *testing.T) (idemkit.TxBeginner, idemkit.Locker){
		"Memory": func(*testing.T) (idemkit.TxBeginner, idemkit.Locker) {
			return memory.NewStore(), memory.NewLocker(nil)
		},
		"MariaDB+Redis": func(t *testing.T) (idemkit.TxBeginner, idemkit.Locker) {
			db := testsvc.MySQL(t, nil)
			name := testsvc.Name("tx_lostlock_")
			testsvc.DropTable(t, db, name)
			st, err := record.New(db, &record.Options{Table: name})
			if err != nil {
				t.Fatal(err)
			}
			if err := st.CreateTable(ctxb); err != nil {
				t.Fatal(err)
			}
			rdb := testsvc.Redis(t)
			prefix := name + ":"
			testsvc.CleanRedis(t, rdb, prefix)
			return st, lock.New(rdb, &lock.Options{Prefix: prefix})
		},
	}
	for name, newBackend := range backends {
		t.Run(name, func(t *testing.T) {
			db, lk := newBackend(t)
			g, err := idemkit.New(db, &idemkit.Options{Locker: lk, LockTTL: lockTTL})
			if err != nil {
				t.Fatal(err)
			}
			call := payCall(testsvc.Name("k"))
			type answer struct {
				res idemkit.Result
				err error
			}
			// hold runs a Tx-mode call with fp and value that holds its function until release is
			// closed; running is closed once the function runs.
			hold := func(fp, value string) (running, release chan struct{}, done chan answer) {
				running, release, done = make(chan struct{}), make(chan struct{}), make(chan answer, 1)
				go func() {
					for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
						ran := false
						res, err := g.Tx(ctxb, db, call(fp), func(context.Context, idemkit.TxStore) ([]byte, error) {
							ran = true
							close(running)
							<-release
							return []byte(value), nil
						})
						if ran || time.Now().After(deadline) {
							done <- answer{res, err}
							return
						}
					}
				}()
				return running, release, done
			}
			wait := func(what string, ch chan struct{}) {
				t.Helper()
				select {
				case <-ch:
				case <-time.After(10 * time.Second):
					t.Fatalf("%s never ran", what)
				}
			}

			a1Running, a1Release, a1Done := hold("fp-a", "a")
			wait("A1", a1Running)
			// A1 runs past LockTTL; B takes the lock once it expired (its tries before that are refused).
			bRunning, bRelease, bDone := hold("fp-b", "b")
			wait("B", bRunning)

			ran := func(context.Context, idemkit.TxStore) ([]byte, error) { t.Error("a duplicate ran"); return nil, nil }
			_, errA2 := g.Tx(ctxb, db, call("fp-a"), ran)

			close(a1Release) // A1 commits first: the key is A's
			if a := <-a1Done; a.err != nil || string(a.res.Value) != "a" {
				t.Fatalf("A1: %+v, %v, want its answer a", a.res, a.err)
			}
			close(bRelease)
			if b := <-bDone; !errors.Is(b.err, idemkit.ErrPayloadMismatch) {
				t.Errorf("B, which A1's commit beat: %+v, %v, want ErrPayloadMismatch", b.res, b.err)
			}
			if !errors.Is(errA2, idemkit.ErrInFlight) {
				t.Errorf("A2 (A's retry) while B holds the lock and A1 runs uncommitted: %v, want ErrInFlight", errA2)
			}
			if res, err := g.Tx(ctxb, db, call("fp-a"), ran); err != nil || !res.Replayed || string(res.Value) != "a" {
				t.Errorf("A's retry afterwards: %+v, %v, want the replay of a", res, err)
			}
		})
	}
}
