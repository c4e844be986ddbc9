package main

import (
	"context"
	"fmt"
	"math"

	"github.com/idemkit/idemkit/admin"
)

func (c *cli) list(ctx context.Context, _ []string) error {
	// One record more than the limit tells whether more match, for a limit the matches just fill.
	f := c.o.filter
	if f.Limit < math.MaxInt {
		f.Limit++
	}
	entries, err := c.listEntries(ctx, f)
	if err != nil {
		return err
	}
	more := len(entries) > c.o.filter.Limit
	entries = entries[:min(len(entries), c.o.filter.Limit)]
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
func (c *cli) listEntries(ctx context.Context, f admin.Filter) ([]*admin.Entry, error) {
	p := c.startProgress("reading " + c.adm.Table())
	defer p.stop()
	f.Progress = p.set
	return c.adm.List(ctx, f)
}
