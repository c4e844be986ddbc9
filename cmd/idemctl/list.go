package main

import (
	"context"
	"fmt"
	"math"

	"github.com/idemkit/idemkit/admin"
)

func (c *cli) list(ctx context.Context, _ []string) error {
	entries, more, err := c.listLimited(ctx)
	if err != nil {
		return err
	}
	now := c.now()
	if c.o.json {
		out := make([]recordJSON, len(entries))
		for i, e := range entries {
			out[i] = c.recordJSON(&e.Record, e.ResponseSize, now)
		}
		c.writeJSON(map[string]any{"records": out, "count": len(out), "limit": c.o.filter.Limit,
			"limit_reached": more})
		return nil
	}
	if len(entries) == 0 {
		fmt.Fprintln(c.stdout, "no records match")
		return nil
	}
	c.entriesTable(c.stdout, entries, now)
	if more {
		fmt.Fprintf(c.stdout, "(first %d; --limit shows more)\n", len(entries))
	}
	return nil
}

// listEntries lists with a progress line on a terminal.
// listLimited returns the records matching the command line's filters, at most --limit, and whether
// more match: it reads one record more than the limit, which tells it for a limit the matches just
// fill.
func (c *cli) listLimited(ctx context.Context) (entries []*admin.Entry, more bool, err error) {
	f := c.o.filter
	if f.Limit < math.MaxInt {
		f.Limit++
	}
	if entries, err = c.listEntries(ctx, f); err != nil {
		return nil, false, err
	}
	return entries[:min(len(entries), c.o.filter.Limit)], len(entries) > c.o.filter.Limit, nil
}

func (c *cli) listEntries(ctx context.Context, f admin.Filter) ([]*admin.Entry, error) {
	p := c.startProgress("reading " + c.adm.Table())
	defer p.stop()
	f.Progress = p.set
	return c.adm.List(ctx, f)
}
