package idemkit_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/memory"
	"github.com/idemkit/idemkit/record"
)

// gatedGetStore is a Store whose next Get, once armed, waits at the gate: an attempt holding the lock
// while it reads the record it met.
type gatedGetStore struct {
	idemkit.Store
	mu      sync.Mutex
	armed   bool
	reached chan struct{}
	open    chan struct{}
}

func (s *gatedGetStore) Get(ctx context.Context, scope, key string) (*idemkit.Record, error) {
	s.mu.Lock()
	armed := s.armed
	s.armed = false
	s.mu.Unlock()
	if armed {
		close(s.reached)
		<-s.open
	}
	return s.Store.Get(ctx, scope, key)
}

// TestHolderOfAnotherPayloadDoesNotRefuseTheKeysOwnPayload: a key finished for payload A and not in
// the cache (CacheTTL off here; a record settled by a reconciler, or Redis restarted, is the same) is
// met by an attempt with payload B, which takes the lock — its token carries B's hash — and reads the
// record, to end in ErrPayloadMismatch. A retry of the original request (payload A) arriving meanwhile
// met that lock and was answered ErrPayloadMismatch too (HTTP 422, not to be retried): the lock's hash
// was taken for the key's payload, although the record binds the key to A and the holder is the one
// that mismatches. The record answers it now: in flight (or its replay), never a mismatch.
func TestHolderOfAnotherPayloadDoesNotRefuseTheKeysOwnPayload(t *testing.T) {
	for name, newBackend := range holderBackends() {
		t.Run(name, func(t *testing.T) {
			base, lk := newBackend(t)
			st := &gatedGetStore{Store: base}
			g, err := idemkit.New(st, &idemkit.Options{Locker: lk, CacheTTL: -1})
			if err != nil {
				t.Fatal(err)
			}
			ctx, call, ran := context.Background(), payCall(testsvc.Name("k")), noDuplicateRun(t)
			other := heldByPayloadB(t, g, st, call, ran)
			res, errSame := g.Do(ctx, call("fp-a"), ran)
			close(st.open)
			if err := <-other; !errors.Is(err, idemkit.ErrPayloadMismatch) {
				t.Errorf("payload B: %v, want ErrPayloadMismatch", err)
			}
			switch {
			case errors.Is(errSame, idemkit.ErrPayloadMismatch):
				t.Errorf("payload A, the key's own, while payload B holds the lock: %v, want ErrInFlight or the replay", errSame)
			case errSame == nil && (!res.Replayed || string(res.Value) != "paid"):
				t.Errorf("payload A: %+v, want the replay of paid", res)
			case errSame != nil && !errors.Is(errSame, idemkit.ErrInFlight):
				t.Errorf("payload A: %v, want ErrInFlight or the replay", errSame)
			}
			if res, err := g.Do(ctx, call("fp-a"), ran); err != nil || !res.Replayed || string(res.Value) != "paid" {
				t.Errorf("payload A afterwards: %+v, %v, want the replay of paid", res, err)
			}
		})
	}
}

// failingGetStore is a gatedGetStore whose Gets fail while fail is set: a database read that failed
// (a connection reset, a pool timeout).
type failingGetStore struct {
	*gatedGetStore
	fail atomic.Bool
}

func (s *failingGetStore) Get(ctx context.Context, scope, key string) (*idemkit.Record, error) {
	if s.fail.Load() {
		return nil, errConnReset
	}
	return s.gatedGetStore.Get(ctx, scope, key)
}

// TestHolderOfAnotherPayloadUnreadIsNoMismatch: as in
// TestHolderOfAnotherPayloadDoesNotRefuseTheKeysOwnPayload, a retry of the key's own payload (A) meets
// the lock of an attempt with payload B, but the read of the record that tells which of the two the
// key is bound to fails. The token says only that the holder's payload is not A's; the call was
// answered ErrPayloadMismatch (HTTP 422, final) all the same — a database blip turned the key's own
// payload away for good. Unread, the key is in flight (retryable), as for a holder without a hash.
func TestHolderOfAnotherPayloadUnreadIsNoMismatch(t *testing.T) {
	for name, newBackend := range holderBackends() {
		t.Run(name, func(t *testing.T) {
			base, lk := newBackend(t)
			st := &failingGetStore{gatedGetStore: &gatedGetStore{Store: base}}
			g, err := idemkit.New(st, &idemkit.Options{Locker: lk, CacheTTL: -1})
			if err != nil {
				t.Fatal(err)
			}
			ctx, call, ran := context.Background(), payCall(testsvc.Name("k")), noDuplicateRun(t)
			other := heldByPayloadB(t, g, st.gatedGetStore, call, ran)
			st.fail.Store(true)
			_, errSame := g.Do(ctx, call("fp-a"), ran)
			st.fail.Store(false)
			close(st.open)
			if err := <-other; !errors.Is(err, idemkit.ErrPayloadMismatch) {
				t.Errorf("payload B: %v, want ErrPayloadMismatch", err)
			}
			if !errors.Is(errSame, idemkit.ErrInFlight) {
				t.Errorf("payload A, the key's own, while payload B holds the lock and the record could not be read: %v, want ErrInFlight", errSame)
			}
			if res, err := g.Do(ctx, call("fp-a"), ran); err != nil || !res.Replayed || string(res.Value) != "paid" {
				t.Errorf("payload A afterwards: %+v, %v, want the replay of paid", res, err)
			}
		})
	}
}

// payCall returns the calls for key with a payload's fingerprint.
func payCall(key string) func(fp string) idemkit.Call {
	return func(fp string) idemkit.Call { return idemkit.Call{Scope: "pay", Key: key, Fingerprint: fp} }
}

// noDuplicateRun is a function no duplicate may run.
func noDuplicateRun(t *testing.T) func(context.Context) ([]byte, error) {
	return func(context.Context) ([]byte, error) { t.Error("a duplicate ran"); return nil, nil }
}

// heldByPayloadB finishes the key of call with payload A ("paid", fingerprint fp-a), then starts a
// call with payload B (fp-b) and returns once it holds the lock and waits in its read of the record,
// at st's gate (closing st.open lets it go on): its answer comes on the channel returned.
func heldByPayloadB(t *testing.T, g *idemkit.Guard, st *gatedGetStore, call func(string) idemkit.Call, ran func(context.Context) ([]byte, error)) <-chan error {
	t.Helper()
	ctx := context.Background()
	if _, err := g.Do(ctx, call("fp-a"), func(context.Context) ([]byte, error) { return []byte("paid"), nil }); err != nil {
		t.Fatal(err)
	}
	st.reached, st.open = make(chan struct{}), make(chan struct{})
	st.mu.Lock()
	st.armed = true
	st.mu.Unlock()
	other := make(chan error, 1)
	go func() {
		_, err := g.Do(ctx, call("fp-b"), ran)
		other <- err
	}()
	<-st.reached // the attempt with payload B holds the lock and reads the record
	return other
}

// holderBackends are the Stores and Lockers the holder tests run on: memory, and MariaDB with Redis.
func holderBackends() map[string]func(t *testing.T) (idemkit.Store, idemkit.Locker) {
	return map[string]func(t *testing.T) (idemkit.Store, idemkit.Locker){
		"Memory": func(*testing.T) (idemkit.Store, idemkit.Locker) {
			return memory.NewStore(), memory.NewLocker(nil)
		},
		"MariaDB+Redis": func(t *testing.T) (idemkit.Store, idemkit.Locker) {
			db := testsvc.MySQL(t, nil)
			name := testsvc.Name("h1_holder_fp_")
			testsvc.DropTable(t, db, name)
			st, err := record.New(db, &record.Options{Table: name})
			if err != nil {
				t.Fatal(err)
			}
			if err := st.CreateTable(context.Background()); err != nil {
				t.Fatal(err)
			}
			rdb := testsvc.Redis(t)
			prefix := name + ":"
			testsvc.CleanRedis(t, rdb, prefix)
			return st, lock.New(rdb, &lock.Options{Prefix: prefix})
		},
	}
}
