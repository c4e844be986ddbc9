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
)

// TestInFlightOtherPayloadIsAMismatch: while an attempt holds a key, a duplicate with another payload
// is answered ErrPayloadMismatch, as it is once the record is written — not in flight, which invites
// a retry that can only end in the mismatch. The same payload, or none, is in flight. The lock tells
// it (the holder's token carries a hash of its fingerprint): Execute mode's record is never read while
// the lock is held. In Tx mode, which writes no record before its function ends, nothing binds the key
// yet — the holder may fail and store nothing, an earlier attempt of the duplicate's payload may
// commit first (TestTxRetryAfterALostLockIsNoMismatch) —: the duplicate is in flight until the record
// says otherwise.
func TestInFlightOtherPayloadIsAMismatch(t *testing.T) {
	lockers := map[string]func(t *testing.T) idemkit.Locker{
		"Memory": func(*testing.T) idemkit.Locker { return memory.NewLocker(nil) },
		"Redis": func(t *testing.T) idemkit.Locker {
			rdb := testsvc.Redis(t)
			prefix := testsvc.Name("inflight-mismatch-") + ":"
			testsvc.CleanRedis(t, rdb, prefix)
			return lock.New(rdb, &lock.Options{Prefix: prefix})
		},
	}
	for name, newLocker := range lockers {
		t.Run(name, func(t *testing.T) {
			st := memory.NewStore()
			g, err := idemkit.New(st, &idemkit.Options{Locker: newLocker(t)})
			if err != nil {
				t.Fatal(err)
			}
			modes := map[string]func(ctx context.Context, c idemkit.Call, fn func() error) error{
				"Do": func(ctx context.Context, c idemkit.Call, fn func() error) error {
					_, err := g.Do(ctx, c, func(context.Context) ([]byte, error) { return []byte("ok"), fn() })
					return err
				},
				"Tx": func(ctx context.Context, c idemkit.Call, fn func() error) error {
					_, err := g.Tx(ctx, st, c, func(context.Context, idemkit.TxStore) ([]byte, error) { return []byte("ok"), fn() })
					return err
				},
			}
			for mode, run := range modes {
				t.Run(mode, func(t *testing.T) {
					key := testsvc.Name("k")
					call := func(fp string) idemkit.Call { return idemkit.Call{Scope: "pay", Key: key, Fingerprint: fp} }
					holding, release := make(chan struct{}), make(chan struct{})
					first := make(chan error, 1)
					go func() {
						first <- run(context.Background(), call("fp-a"), func() error {
							close(holding)
							<-release
							return nil
						})
					}()
					<-holding
					ran := func() error { t.Error("a duplicate ran"); return nil }
					want := idemkit.ErrPayloadMismatch
					if mode == "Tx" {
						want = idemkit.ErrInFlight
					}
					if err := run(context.Background(), call("fp-b"), ran); !errors.Is(err, want) {
						t.Errorf("another payload while in flight: %v, want %v", err, want)
					}
					for _, fp := range []string{"fp-a", ""} {
						if err := run(context.Background(), call(fp), ran); !errors.Is(err, idemkit.ErrInFlight) {
							t.Errorf("payload %q while in flight: %v, want ErrInFlight", fp, err)
						}
					}
					close(release)
					if err := <-first; err != nil {
						t.Fatal(err)
					}
					if err := run(context.Background(), call("fp-b"), ran); !errors.Is(err, idemkit.ErrPayloadMismatch) {
						t.Errorf("another payload once finished: %v, want ErrPayloadMismatch", err)
					}
				})
			}
		})
	}
}

// TestInFlightErrorNamesTheHolder: both Lockers tell the token a key is held with.
func TestInFlightErrorNamesTheHolder(t *testing.T) {
	rdb := testsvc.Redis(t)
	prefix := testsvc.Name("inflight-holder-") + ":"
	testsvc.CleanRedis(t, rdb, prefix)
	for name, lk := range map[string]idemkit.Locker{"Memory": memory.NewLocker(nil), "Redis": lock.New(rdb, &lock.Options{Prefix: prefix})} {
		if _, err := lk.Acquire(context.Background(), "k", "holder-token", time.Minute); err != nil {
			t.Fatal(err)
		}
		var ife *idemkit.InFlightError
		if _, err := lk.Acquire(context.Background(), "k", "other", time.Minute); !errors.As(err, &ife) || ife.Holder != "holder-token" {
			t.Errorf("%s: Acquire of a held key = %v (%+v), want an InFlightError naming holder-token", name, err, ife)
		}
	}
}
