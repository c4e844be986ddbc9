package main

import (
	"context"
	"fmt"

	"github.com/idemkit/idemkit/admin"
)

func (c *cli) sweep(ctx context.Context, _ []string) error {
	if !c.o.dryRun {
		return c.sweepNow(ctx)
	}
	p := c.startProgress("planning a sweep of " + c.adm.Table())
	plan, err := c.adm.PlanSweep(ctx, c.o.filter.Limit)
	p.stop()
	if err != nil {
		return err
	}
	now := plan.Now
	if c.o.json {
		conv := func(es []*admin.Entry) []recordJSON {
			out := make([]recordJSON, len(es))
			for i, e := range es {
				out[i] = c.recordJSON(&e.Record, e.ResponseSize, now)
			}
			return out
		}
		c.writeJSON(map[string]any{
			"now":       now.UTC(),
			"delete":    map[string]any{"total": plan.ExpiredTotal, "records": conv(plan.Expired)},
			"recover":   map[string]any{"total": plan.StaleTotal, "records": conv(plan.Stale)},
			"reconcile": map[string]any{"total": plan.PendingTotal, "records": conv(plan.Pending)},
		})
		return nil
	}
	sections := []struct {
		title string
		total int64
		list  []*admin.Entry
	}{
		{"would delete (expired; they count as absent already)", plan.ExpiredTotal, plan.Expired},
		{"would recover (stuck claims without a gid: FAILED, fence + 1, so a retry runs)", plan.StaleTotal, plan.Stale},
		{"left to the reconciler (stuck claims of a global transaction: it asks DTM and settles them)", plan.PendingTotal, plan.Pending},
	}
	for i, s := range sections {
		if i > 0 {
			fmt.Fprintln(c.stdout)
		}
		fmt.Fprintf(c.stdout, "%d %s\n", s.total, s.title)
		if len(s.list) > 0 {
			c.entriesTable(c.stdout, s.list, now)
			if int64(len(s.list)) < s.total {
				fmt.Fprintf(c.stdout, "(first %d of %d)\n", len(s.list), s.total)
			}
		}
	}
	if c.o.namespace != "" {
		fmt.Fprintf(c.stdout, "\nOnly namespace %q is shown; a sweeper works on the whole table.\n", c.o.namespace)
	}
	return nil
}

func (c *cli) sweepNow(ctx context.Context) error {
	q := fmt.Sprintf("Run a sweeper pass over table %s: delete up to %d expired records and recover up to %d stuck claims?",
		c.adm.Table(), c.o.filter.Limit, c.o.filter.Limit)
	// Without Redis the dead holders' locks stay, and nothing can delete them later: a recovered
	// record names no owner, and a lock is only ever deleted by its holder's token.
	locksKept := ""
	if c.rdb == nil {
		locksKept = "without --redis the locks the recovered claims' holders may still hold stay until they expire (the application's LockTTL): until then their retries are answered as in flight, and idemctl cannot delete them afterwards"
		q += " W" + locksKept[1:] + "; answer no and give --redis to delete them with the recovery."
	}
	ctx, err := c.confirm(q) // a fresh --timeout for what follows
	if err != nil {
		return err
	}
	deleted, recovered, err := c.adm.Sweep(ctx, c.o.filter.Limit)
	limitReached := deleted == c.o.filter.Limit || recovered == c.o.filter.Limit // more may be left
	if c.o.json {
		warning := ""
		if recovered > 0 {
			warning = locksKept
		}
		c.writeJSON(map[string]any{"deleted": deleted, "recovered": recovered, "error": errString(err), "warning": warning, "limit_reached": limitReached})
	} else {
		more := ""
		if limitReached {
			more = fmt.Sprintf(" (--limit %d reached: more may be left; run it again or raise --limit)", c.o.filter.Limit)
		}
		fmt.Fprintf(c.stdout, "deleted %d expired record(s), recovered %d stuck claim(s)%s\n", deleted, recovered, more)
		if locksKept != "" && recovered > 0 {
			fmt.Fprintf(c.stdout, "note: %s\n", locksKept)
		}
	}
	return err
}
