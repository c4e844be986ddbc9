//go:build unix

package chaos

import (
	"context"
	"errors"

	"github.com/idemkit/idemkit"
)

// fenceIgnoringStore is the SabotageIgnoreFence fault: a Store whose compare-and-swap writes, when
// refused for a stale version, are retried on whatever version is stored now. A stale holder's
// finish then overwrites the attempt that took over from it, and two takeovers can both win. It
// exists only to prove that the checker notices.
type fenceIgnoringStore struct{ idemkit.Store }

func (s fenceIgnoringStore) Update(ctx context.Context, rec *idemkit.Record, prev idemkit.Version) error {
	err := s.Store.Update(ctx, rec, prev)
	if !errors.Is(err, idemkit.ErrFenced) {
		return err
	}
	cur, gerr := s.Store.Get(ctx, rec.Scope, rec.Key)
	if gerr != nil {
		return err
	}
	return s.Store.Update(ctx, rec, cur.Version())
}

func (s fenceIgnoringStore) Delete(ctx context.Context, scope, key string, prev idemkit.Version) error {
	err := s.Store.Delete(ctx, scope, key, prev)
	if !errors.Is(err, idemkit.ErrFenced) {
		return err
	}
	cur, gerr := s.Store.Get(ctx, scope, key)
	if gerr != nil {
		return err
	}
	return s.Store.Delete(ctx, scope, key, cur.Version())
}
