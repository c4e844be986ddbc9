package idemkit_test

import (
	"context"
	"errors"
	"testing"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/memory"
	"github.com/idemkit/idemkit/record"
)

// TestInFlightTakeoverWithoutFingerprintIsAMismatch: a key's first attempt, with a fingerprint, failed
// (FAILED); a later attempt without one took it over, and its record keeps the first fingerprint, which
// binds the key for its lifetime. While that attempt ran, a duplicate with another payload was answered
// ErrInFlight: the lock's token carries no fingerprint hash for a call that gives none, and the lock
// answers before any record is read. The record said ErrPayloadMismatch, and did once the attempt ended.
func TestInFlightTakeoverWithoutFingerprintIsAMismatch(t *testing.T) {
	backends := map[string]func(t *testing.T) (idemkit.Store, idemkit.Locker){
		"Memory": func(*testing.T) (idemkit.Store, idemkit.Locker) {
			return memory.NewStore(), memory.NewLocker(nil)
		},
		"MariaDB+Redis": func(t *testing.T) (idemkit.Store, idemkit.Locker) {
			db := testsvc.MySQL(t, nil)
			name := testsvc.Name("takeover_fp_")
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
	for name, newBackend := range backends {
		t.Run(name, func(t *testing.T) {
			st, lk := newBackend(t)
			g, err := idemkit.New(st, &idemkit.Options{Locker: lk})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			key := testsvc.Name("k")
			call := func(fp string) idemkit.Call { return idemkit.Call{Scope: "pay", Key: key, Fingerprint: fp} }
			errTransient := idemkit.Retryable(errors.New("gateway timeout"))
			if _, err := g.Do(ctx, call("fp-a"), func(context.Context) ([]byte, error) { return nil, errTransient }); !errors.Is(err, errTransient) {
				t.Fatalf("first attempt: %v", err)
			}

			holding, release := make(chan struct{}), make(chan struct{})
			second := make(chan error, 1)
			go func() {
				_, err := g.Do(ctx, call(""), func(context.Context) ([]byte, error) {
					close(holding)
					<-release
					return []byte("ok"), nil
				})
				second <- err
			}()
			<-holding
			ran := func(context.Context) ([]byte, error) { t.Error("a duplicate ran"); return nil, nil }
			_, errOther := g.Do(ctx, call("fp-b"), ran)
			_, errSame := g.Do(ctx, call("fp-a"), ran)
			close(release)
			if err := <-second; err != nil {
				t.Fatalf("takeover without a fingerprint: %v", err)
			}
			if !errors.Is(errOther, idemkit.ErrPayloadMismatch) {
				t.Errorf("another payload while the takeover runs: %v, want ErrPayloadMismatch", errOther)
			}
			if !errors.Is(errSame, idemkit.ErrInFlight) {
				t.Errorf("the first payload while the takeover runs: %v, want ErrInFlight", errSame)
			}
			if _, err := g.Do(ctx, call("fp-b"), ran); !errors.Is(err, idemkit.ErrPayloadMismatch) {
				t.Errorf("another payload once the takeover finished: %v, want ErrPayloadMismatch", err)
			}
		})
	}
}
