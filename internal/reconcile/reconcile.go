// Package reconcile holds what the transaction reconcilers (hooks.Reconciler, dtmmsg.Reconciler)
// share: the walk through the pending records.
package reconcile

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/idemkit/idemkit"
)

// Recovering runs settle, a reconciler's settling of the record of gid, and returns the error of a
// panic in it (a hook's, the manager's), with its stack, or nil. Run in a sweeper's goroutine, the
// panic would take the process down, and again after each restart at the same record, which heads the
// pending listing: the record stays as it was for a later pass (hooks are idempotent, and run again),
// and the pass goes on with the others.
func Recovering(gid string, settle func()) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("settling %s panicked: %v\n%s", gid, v, debug.Stack())
		}
	}()
	settle()
	return nil
}

// PagesPerRun bounds the pages of pending records one pass looks at.
const PagesPerRun = 4

// MaxUnanswered is how many records in a row a reconciler's transaction manager may fail to answer
// about before the pass stops (see [Cursor.WalkUntil]): asking it about the others would cost each of
// them the client's timeout.
const MaxUnanswered = 3

// Silence counts the records in a row a reconciler's transaction manager did not answer about; a pass
// stops at MaxUnanswered. The zero value has counted none.
type Silence struct{ n int }

// Note records whether the manager answered about a record, and reports whether the pass is to stop.
func (s *Silence) Note(answered bool) (stop bool) {
	if answered {
		s.n = 0
	} else {
		s.n++
	}
	return s.Stop()
}

// Stop reports whether the manager failed to answer MaxUnanswered records in a row.
func (s *Silence) Stop() bool { return s.n >= MaxUnanswered }

// Err is what a pass that stopped reports: pkg is the reconciler's package, manager names the
// transaction manager.
func (s *Silence) Err(pkg, manager string) error {
	return fmt.Errorf("%s: %s did not answer about %d records in a row: this pass stops here, the next goes on after them", pkg, manager, s.n)
}

// Lister lists up to limit pending records after after in the listing's order (nil: from its head),
// as [idemkit.Guard.PendingAfter] does.
type Lister func(ctx context.Context, after *idemkit.Record, limit int) ([]*idemkit.Record, error)

// Cursor is where a reconciler's next pass goes on listing its pending records. Records whose
// transaction is still running keep their lapsed lease, so they stay at the head of the listing; a
// reconciler that always listed from the head would, once a batch of them piles up, never reach the
// newer records whose transaction ended. The zero value starts at the head. It is safe for concurrent
// use.
type Cursor struct {
	mu    sync.Mutex
	after *idemkit.Record
}

// Walk lists pending records with list, page by page of limit, from where the previous Walk stopped,
// and calls settle for each until settle reported limit records settled, PagesPerRun pages were
// looked at, or the listing ended — the next Walk then starts again at its head. A lister that cannot
// page (pageable false) is asked for one page, from the head. Walk returns how many records settle
// reported settled, and the listing's error, if any.
func (c *Cursor) Walk(ctx context.Context, list Lister, pageable bool, limit int, settle func(*idemkit.Record) bool) (int, error) {
	return c.WalkUntil(ctx, list, pageable, limit, func(rec *idemkit.Record) (bool, bool) { return settle(rec), false })
}

// WalkUntil is [Cursor.Walk] with a settle function that may also end the walk: when it reports stop,
// the record counts as looked at (the next walk goes on after it) and no other is. A reconciler stops
// once its transaction manager failed to answer several records in a row: asking it about the others
// would cost each of them the client's timeout.
func (c *Cursor) WalkUntil(ctx context.Context, list Lister, pageable bool, limit int, settle func(*idemkit.Record) (settled, stop bool)) (int, error) {
	pages := PagesPerRun
	var after *idemkit.Record
	if pageable {
		c.mu.Lock()
		after = c.after
		c.mu.Unlock()
	} else {
		pages = 1
	}
	settled, stopped := 0, false
	var err error
	for page := 0; page < pages && settled < limit && !stopped; page++ {
		var recs []*idemkit.Record
		if recs, err = list(ctx, after, limit); err != nil {
			break
		}
		for _, rec := range recs {
			after = rec
			ok, stop := settle(rec)
			if ok {
				settled++
			}
			if settled == limit || stop {
				stopped = stop
				break
			}
		}
		if len(recs) < limit && (!stopped || after == recs[len(recs)-1]) {
			after = nil // the end of the listing
			break
		}
	}
	if pageable {
		c.mu.Lock()
		c.after = after
		c.mu.Unlock()
	}
	return settled, err
}

// Source returns what a reconciler walks: pending when it is set (a lister of the user's, which cannot
// page), otherwise g's pending records of scopes, listed with [idemkit.Guard.PendingAfter] as of now;
// nil when there is neither.
func Source(now time.Time, pending func(ctx context.Context, now time.Time, limit int) ([]*idemkit.Record, error),
	g *idemkit.Guard, scopes []string) (list Lister, pageable bool) {
	switch {
	case pending != nil:
		return func(ctx context.Context, _ *idemkit.Record, limit int) ([]*idemkit.Record, error) {
			return pending(ctx, now, limit)
		}, false
	case g != nil && len(scopes) > 0:
		return func(ctx context.Context, after *idemkit.Record, limit int) ([]*idemkit.Record, error) {
			return g.PendingAfter(ctx, now, after, limit, scopes...)
		}, true
	}
	return nil, false
}

// ScopeNames maps the stored form of each of scopes (g's namespace applied) to the name given, for a
// reconciler's events; nil without g or scopes.
func ScopeNames(g *idemkit.Guard, scopes []string) map[string]string {
	if g == nil || len(scopes) == 0 {
		return nil
	}
	m := make(map[string]string, len(scopes))
	for _, s := range scopes {
		if a, err := g.Address(s, "-"); err == nil {
			m[a.Scope] = s
		}
	}
	return m
}
