package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/admin"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/txstatus"
)

func (c *cli) dtm(ctx context.Context, pos []string) error {
	gid := pos[0]
	client := &txstatus.Client{Server: c.o.dtm, HTTP: &http.Client{Timeout: 10 * time.Second}}
	st, err := client.Status(ctx, gid)
	if err != nil {
		return err
	}
	f := admin.Filter{GID: gid, Limit: c.o.filter.Limit}
	entries, err := c.listEntries(ctx, f)
	if err != nil {
		return err
	}
	now := c.now()
	reading := readDTM(gid, st, entries, now)
	if c.o.json {
		recs := make([]recordJSON, len(entries))
		for i, e := range entries {
			recs[i] = c.recordJSON(&e.Record, e.ResponseSize, now)
		}
		status := string(st)
		if st == txstatus.Unknown {
			status = "unknown"
		}
		c.writeJSON(map[string]any{"gid": gid, "dtm_status": status, "records": recs, "reading": reading})
	} else {
		status := string(st)
		if st == txstatus.Unknown {
			status = "unknown to DTM (never submitted, or already cleaned up)"
		}
		fmt.Fprintf(c.stdout, "global transaction %s\nDTM status: %s (%s)\n\n", gid, status, c.o.dtm)
		if len(entries) == 0 {
			fmt.Fprintln(c.stdout, "no record carries this gid")
		} else {
			fmt.Fprintf(c.stdout, "%d record(s) carry it:\n", len(entries))
			c.entriesTable(c.stdout, entries, now)
		}
		fmt.Fprintf(c.stdout, "\n%s\n", reading)
	}
	if st == txstatus.Unknown && len(entries) == 0 {
		return fmt.Errorf("%w: DTM does not know global transaction %q and no record carries it", errNotFound, gid)
	}
	return nil
}

// msgGIDPrefix is dtmmsg.GIDPrefix, which starts the gid of every 2-phase message dtmmsg.Publisher
// publishes; dtmmsg.Reconciler settles their records by back-checking the local transaction. It is
// not imported (that would bring DTM's client into idemctl); TestMsgGIDPrefix checks they agree.
const msgGIDPrefix = "msg-"

// readDTM says what the transaction's status means for its records.
func readDTM(gid string, st txstatus.Status, entries []*admin.Entry, now time.Time) string {
	var processing, stuck, old int
	for _, e := range entries {
		if e.Status == idemkit.StatusProcessing {
			processing++
			if e.LeaseExpired(now) {
				stuck++
			}
			if now.Sub(e.CreatedAt) > hooks.DefaultFenceWithin {
				old++
			}
		}
	}
	switch {
	case processing == 0 && len(entries) > 0:
		return "Every record is settled."
	case processing == 0:
		return "Nothing to settle here."
	case st.Final() && stuck > 0:
		return fmt.Sprintf("DTM says %s but %d record(s) are still PROCESSING with their lease run out: the reconciler (hooks.Reconciler under the sweeper) settles them on its next pass, as %s. If none runs, start one; do not release them by hand.", st, stuck, map[txstatus.Status]string{txstatus.Succeed: "SUCCEEDED", txstatus.Failed: "FAILED"}[st])
	case st.Final():
		return fmt.Sprintf("DTM says %s; %d record(s) are PROCESSING with a live lease: the initiator is settling them (or the reconciler will once the lease runs out).", st, processing)
	case st == txstatus.Unknown && old > 0:
		return fmt.Sprintf("DTM has no transaction %s, and %d of its %d PROCESSING record(s) were claimed more than %s ago (the reconcilers' FenceWithin, unless the application changed it): DTM may have forgotten a transaction that ran (its Redis store drops a finished one a day after it ends), so the reconciler does not fail them but reports them and leaves them PROCESSING, and the key answers in flight until an operator acts. If you know the transaction did not run, release them (idemctl release --force SCOPE KEY: the next attempt runs it again); if it ran, its key must not run again.", gid, old, processing, hooks.DefaultFenceWithin)
	case st == txstatus.Unknown && strings.HasPrefix(gid, msgGIDPrefix):
		return fmt.Sprintf("DTM has no message %s: once the lease of its %d PROCESSING record(s) runs out, the message reconciler (dtmmsg.Reconciler) back-checks its local transaction. If it never committed, they are settled FAILED and a retry publishes anew; if it committed, DTM lost a message it had prepared (its store did not keep it), and they stay PROCESSING for an operator: delivered or not, only you can tell (then idemctl release --force SCOPE KEY if it was not).", gid, processing)
	case st == txstatus.Unknown:
		return fmt.Sprintf("DTM has no transaction %s: it was never submitted (the initiator died before), so the reconciler settles its %d PROCESSING record(s) as failed once their lease runs out, and a retry runs again.", gid, processing)
	default:
		return fmt.Sprintf("The transaction is still %s: its %d PROCESSING record(s) stay in flight until DTM finishes it; the reconciler then settles them.", st, processing)
	}
}
