//go:build unix

package msgchaos

import (
	"context"
	"fmt"
	"sort"
	"sync/atomic"

	"github.com/idemkit/idemkit/msgx"
)

// maxListed bounds the violations listed per kind.
const maxListed = 20

// world is what the checker reads once the consumers stopped: the effect rows by message id, the
// records' status by key, the dead letters, the totals row, what the broker still holds, and how the
// consumers said their GaveUp decisions came, by message id ("advisory", "in-flight", "other"; see
// the worker's "g" lines).
type world struct {
	effects      map[string]*effect
	status       map[string]string
	dead         []deadLetter
	total, count int64 // the totals row
	pending      int
	gaveUp       map[string]map[string]bool
}

// effect is the effect rows of one message id.
type effect struct {
	n      int
	amount int64
}

// check reads the effects, the totals, the records and the dead letters after the consumers
// stopped, and records every violation (see judge).
func (h *harness) check(ctx context.Context) error {
	rep := h.rep
	h.outcomes.Range(func(k, v any) bool {
		rep.Outcomes[k.(string)] = int(v.(*atomic.Int64).Load())
		return true
	})
	h.seen.Lock()
	for _, outcomes := range h.advisory {
		rep.AdvisorySettled++
		for o := range outcomes {
			if rep.Advisory == nil {
				rep.Advisory = map[string]int{}
			}
			rep.Advisory[o]++
		}
	}
	w := world{effects: map[string]*effect{}, status: map[string]string{}, gaveUp: h.gaveUp}
	defer h.seen.Unlock()

	rows, err := h.db.WithContext(ctx).Raw("SELECT msg_id, amount FROM " + h.spec.Tables.Effects).Rows()
	if err != nil {
		return err
	}
	for rows.Next() {
		var id string
		var amount int64
		if err := rows.Scan(&id, &amount); err != nil {
			rows.Close()
			return err
		}
		e := w.effects[id]
		if e == nil {
			e = &effect{}
			w.effects[id] = e
		}
		e.n++
		e.amount += amount
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	rows, err = h.db.WithContext(ctx).Raw("SELECT idem_key, status FROM " + h.spec.Tables.Records).Rows()
	if err != nil {
		return err
	}
	for rows.Next() {
		var k, s string
		if err := rows.Scan(&k, &s); err != nil {
			rows.Close()
			return err
		}
		w.status[k] = s
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if w.dead, err = h.broker.deadLetters(ctx); err != nil {
		return err
	}
	if err := h.db.WithContext(ctx).Raw("SELECT total, n FROM "+h.spec.Tables.Totals+" WHERE id = 1").Row().Scan(&w.total, &w.count); err != nil {
		return err
	}
	if w.pending, err = h.broker.pending(ctx); err != nil {
		return err
	}
	judge(h.plan, h.cfg.NATSMaxDeliver > 0, &w, rep)
	return nil
}

// judge records in rep every violation of "each message took effect exactly once, nothing was lost,
// every poison or rejected message is dead-lettered" in w, the world after a run of plan.
//
// With maxDeliver (a JetStream consumer with MaxDeliver) a message killed on its last delivery is
// settled from the server's MAX_DELIVERIES advisory, and one that did not take effect is
// dead-lettered GaveUp: a message may then end with no effect (and a record that is not SUCCEEDED)
// and a GaveUp dead letter instead of its one effect — a rejected one with such a dead letter
// instead of its REJECTED record — but never with neither (lost) nor two effects. One effect beside a
// GaveUp dead letter is what natsjs documents when another delivery of the message ran as the
// message was given up — the advisory settled while a Tx-mode delivery had not committed (its record
// reads as none), or a last delivery found the key held (InFlight) — and the consumers said so:
// counted in rep.GaveUpRaced, not a violation. Otherwise it is one, whatever maxDeliver.
func judge(plan []*planned, maxDeliver bool, w *world, rep *Report) {
	add := func(format string, args ...any) {
		rep.Violations = append(rep.Violations, fmt.Sprintf(format, args...))
	}
	var sum int64
	for _, e := range w.effects {
		sum += e.amount
		rep.Effects += e.n
	}
	deadIDs, deadGaveUp, deadPoison := map[string]int{}, map[string]int{}, map[int]int{}
	for _, d := range w.dead {
		switch {
		case d.Poison > 0:
			deadPoison[d.Poison]++
		default:
			deadIDs[d.ID]++
			if d.Outcome == msgx.GaveUp.String() {
				deadGaveUp[d.ID]++
			}
		}
	}
	rep.DeadLetters = len(w.dead)

	var lost, doubled, leaked, notRejected, notDead, wrongStatus, gaveUpAndEffect []string
	var want int64
	known := map[string]bool{}
	for _, p := range plan {
		rep.Messages++
		switch p.Body.Kind {
		case kindPoison:
			rep.Poison++
			if deadPoison[p.Body.Poison] == 0 {
				notDead = append(notDead, fmt.Sprintf("poison #%d", p.Body.Poison))
			}
			continue
		case kindReject:
			rep.Rejects++
		case kindFlaky:
			rep.Flaky++
		}
		known[p.ID] = true
		e := w.effects[p.ID]
		n := 0
		if e != nil {
			n = e.n
		}
		// Given up at MaxDeliver, without an effect: dead-lettered GaveUp instead.
		gaveUp := maxDeliver && n == 0 && deadGaveUp[p.ID] > 0 && w.status[p.ID] != "SUCCEEDED"
		if gaveUp {
			rep.GaveUp++
		}
		switch p.Body.Kind {
		case kindOK, kindFlaky:
			if gaveUp {
				break
			}
			want += p.Body.Amount
			switch {
			case n == 0:
				lost = append(lost, p.ID)
			case n > 1:
				doubled = append(doubled, fmt.Sprintf("%s ×%d", p.ID, n))
			case e.amount != p.Body.Amount:
				doubled = append(doubled, fmt.Sprintf("%s amount %d, want %d", p.ID, e.amount, p.Body.Amount))
			}
			if s := w.status[p.ID]; s != "SUCCEEDED" {
				wrongStatus = append(wrongStatus, fmt.Sprintf("%s is %q, want SUCCEEDED", p.ID, s))
			}
			if n == 1 && deadGaveUp[p.ID] > 0 {
				switch how := w.gaveUp[p.ID]; {
				case how["advisory"]:
					rep.GaveUpRaced = append(rep.GaveUpRaced, p.ID+" (advisory)")
				case how["in-flight"]:
					rep.GaveUpRaced = append(rep.GaveUpRaced, p.ID+" (in-flight)")
				default:
					gaveUpAndEffect = append(gaveUpAndEffect, p.ID)
				}
			}
		case kindReject:
			if n > 0 {
				leaked = append(leaked, fmt.Sprintf("%s ×%d", p.ID, n))
			}
			if s := w.status[p.ID]; s != "REJECTED" && !gaveUp {
				notRejected = append(notRejected, fmt.Sprintf("%s is %q", p.ID, s))
			}
			if deadIDs[p.ID] == 0 {
				notDead = append(notDead, p.ID)
			}
		}
	}
	sort.Strings(rep.GaveUpRaced)
	var unknown []string
	for id, e := range w.effects {
		if !known[id] {
			unknown = append(unknown, fmt.Sprintf("%q ×%d", id, e.n))
		}
	}
	list := func(what string, items []string) {
		if len(items) == 0 {
			return
		}
		sort.Strings(items)
		n, more := len(items), ""
		if n > maxListed {
			more = fmt.Sprintf(" and %d more", n-maxListed)
			items = items[:maxListed]
		}
		add("%s (%d): %v%s", what, n, items, more)
	}
	list("messages that never took effect (lost)", lost)
	list("messages that took effect more than once", doubled)
	list("rejected messages whose effects committed", leaked)
	list("effects of messages never published", unknown)
	list("rejected messages without a REJECTED record", notRejected)
	list("rejected or poison messages missing from the dead letters", notDead)
	list("messages whose record is not SUCCEEDED", wrongStatus)
	list("messages that took effect and were dead-lettered GaveUp by no delivery that raced the effect", gaveUpAndEffect)

	// Conservation: the totals row moved with every effect, in the same transactions.
	if w.total != sum || w.count != int64(rep.Effects) {
		add("totals (%d over %d effects) disagree with the effect rows (%d over %d)", w.total, w.count, sum, rep.Effects)
	}
	if sum != want {
		add("effects sum to %d, want %d", sum, want)
	}
	rep.EffectsSum, rep.WantSum = sum, want
	if w.pending != 0 {
		add("%d messages left on the broker after the consumers stopped", w.pending)
	}
}
