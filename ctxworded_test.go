package idemkit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/memory"
)

// errDriverTimeout is a driver's own wording of an interruption by the caller's deadline: pgx's
// "i/o timeout" from the deadline it set on the connection, SQLite's "interrupted". It wraps no
// context error.
var errDriverTimeout = errors.New("read tcp 127.0.0.1:5432: i/o timeout")

// wordingStore waits for its caller's context to end on Insert and Get, then answers with the
// driver's own words instead of the context's error.
type wordingStore struct{ *memory.Store }

func (s wordingStore) Insert(ctx context.Context, r *idemkit.Record) error {
	<-ctx.Done()
	return errDriverTimeout
}

func (s wordingStore) Get(ctx context.Context, scope, key string) (*idemkit.Record, error) {
	<-ctx.Done()
	return nil, errDriverTimeout
}

// TestCallerDeadlineInTheDriversWordsIsNoOutage: a caller whose deadline passed while its claim was
// being written or its record read, on a driver that words the interruption its own way, got
// ErrStoreUnavailable — an outage, answered as one (httpx 503, grpcx UNAVAILABLE, a message handler's
// store outage) — though the store was fine and the caller had left. It now gets its context's error,
// as a driver that wraps it gives, with the driver's error wrapped beside it.
func TestCallerDeadlineInTheDriversWordsIsNoOutage(t *testing.T) {
	for _, mode := range []string{"Do", "Tx"} {
		t.Run(mode, func(t *testing.T) {
			ws := wordingStore{memory.NewStore()}
			g, err := idemkit.New(ws, nil)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
			defer cancel()
			call := idemkit.Call{Scope: "s", Key: "k-" + mode}
			ran := false
			fn := func(context.Context) ([]byte, error) { ran = true; return []byte("ok"), nil }
			if mode == "Do" {
				_, err = g.Do(ctx, call, fn)
			} else {
				_, err = g.Tx(ctx, ws, call, func(ctx context.Context, _ idemkit.TxStore) ([]byte, error) { return fn(ctx) })
			}
			if ran {
				t.Fatal("the function ran")
			}
			if errors.Is(err, idemkit.ErrStoreUnavailable) || !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, errDriverTimeout) {
				t.Fatalf("%s: %v (ErrStoreUnavailable %v, DeadlineExceeded %v), want the caller's deadline with the driver's error",
					mode, err, errors.Is(err, idemkit.ErrStoreUnavailable), errors.Is(err, context.DeadlineExceeded))
			}
		})
	}
}
