package idemkit

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Pending returns up to limit records of the given scopes that a transaction reconciler must settle:
// PROCESSING, tied to a global transaction (a GID), lease run out by now, oldest lease first, expired
// or not. Scopes are given as in [Call.Scope]; the Guard applies its namespace and stored form, so a
// reconciler only ever sees the records of its own application and scopes. Settle them with
// [Guard.Settle].
//
// It returns an error when no scope is given, a scope is invalid (ErrInvalidKey), the Store does not
// implement [PendingLister], or the Store fails.
func (g *Guard) Pending(ctx context.Context, now time.Time, limit int, scopes ...string) ([]*Record, error) {
	return g.PendingAfter(ctx, now, nil, limit, scopes...)
}

// PendingAfter is [Guard.Pending] from a point of its listing on: only records after after, a record
// an earlier call returned, in the listing's order (lease, then scope, then key). A nil after starts
// at the beginning. A reconciler pages with it past records whose transaction is still running, which
// keep their lapsed lease and so stay at the head of the listing.
func (g *Guard) PendingAfter(ctx context.Context, now time.Time, after *Record, limit int, scopes ...string) ([]*Record, error) {
	if len(scopes) == 0 {
		return nil, errors.New("idemkit: Pending needs the scopes to list: a reconciler settles only its own")
	}
	pl, ok := g.store.(PendingLister)
	if !ok {
		return nil, fmt.Errorf("idemkit: the Store (%T) cannot list pending records (it does not implement PendingLister)", g.store)
	}
	q := PendingQuery{Now: now, Limit: limit, After: after, Scopes: make([]string, 0, len(scopes))}
	for _, s := range scopes {
		id, err := g.identify(&Call{Scope: s, Key: "-"})
		if err != nil {
			return nil, err
		}
		q.Scopes = append(q.Scopes, id.scope)
	}
	recs, err := pl.Pending(ctx, q)
	if err != nil {
		return nil, storeErr(ctx, "listing pending records", err)
	}
	return recs, nil
}
