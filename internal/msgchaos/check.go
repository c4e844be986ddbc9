//go:build unix

package msgchaos

import (
	"context"
	"fmt"
	"sort"
	"sync/atomic"
)

// maxListed bounds the violations listed per kind.
const maxListed = 20

// check reads the effects, the totals, the records and the dead letters after the consumers
// stopped, and records every violation of "each message took effect exactly once, nothing was lost,
// every poison or rejected message is dead-lettered".
func (h *harness) check(ctx context.Context) error {
	rep := h.rep
	h.outcomes.Range(func(k, v any) bool {
		rep.Outcomes[k.(string)] = int(v.(*atomic.Int64).Load())
		return true
	})
	add := func(format string, args ...any) {
		rep.Violations = append(rep.Violations, fmt.Sprintf(format, args...))
	}

	// Effects per message id.
	type eff struct {
		n      int
		amount int64
	}
	effects := map[string]*eff{}
	rows, err := h.db.WithContext(ctx).Raw("SELECT msg_id, amount FROM " + h.spec.Tables.Effects).Rows()
	if err != nil {
		return err
	}
	var sum int64
	for rows.Next() {
		var id string
		var amount int64
		if err := rows.Scan(&id, &amount); err != nil {
			rows.Close()
			return err
		}
		e := effects[id]
		if e == nil {
			e = &eff{}
			effects[id] = e
		}
		e.n++
		e.amount += amount
		sum += amount
		rep.Effects++
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	// Records by key.
	status := map[string]string{}
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
		status[k] = s
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	dead, err := h.broker.deadLetters(ctx)
	if err != nil {
		return err
	}
	deadIDs, deadPoison := map[string]int{}, map[int]int{}
	for _, d := range dead {
		if d.Poison > 0 {
			deadPoison[d.Poison]++
		} else {
			deadIDs[d.ID]++
		}
	}
	rep.DeadLetters = len(dead)

	var lost, doubled, leaked, notRejected, notDead, wrongStatus []string
	var want int64
	known := map[string]bool{}
	for _, p := range h.plan {
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
		e := effects[p.ID]
		n := 0
		if e != nil {
			n = e.n
		}
		switch p.Body.Kind {
		case kindOK, kindFlaky:
			want += p.Body.Amount
			switch {
			case n == 0:
				lost = append(lost, p.ID)
			case n > 1:
				doubled = append(doubled, fmt.Sprintf("%s ×%d", p.ID, n))
			case e.amount != p.Body.Amount:
				doubled = append(doubled, fmt.Sprintf("%s amount %d, want %d", p.ID, e.amount, p.Body.Amount))
			}
			if s := status[p.ID]; s != "SUCCEEDED" {
				wrongStatus = append(wrongStatus, fmt.Sprintf("%s is %q, want SUCCEEDED", p.ID, s))
			}
		case kindReject:
			if n > 0 {
				leaked = append(leaked, fmt.Sprintf("%s ×%d", p.ID, n))
			}
			if s := status[p.ID]; s != "REJECTED" {
				notRejected = append(notRejected, fmt.Sprintf("%s is %q", p.ID, s))
			}
			if deadIDs[p.ID] == 0 {
				notDead = append(notDead, p.ID)
			}
		}
	}
	var unknown []string
	for id, e := range effects {
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

	// Conservation: the totals row moved with every effect, in the same transactions.
	var total, n int64
	if err := h.db.WithContext(ctx).Raw("SELECT total, n FROM "+h.spec.Tables.Totals+" WHERE id = 1").Row().Scan(&total, &n); err != nil {
		return err
	}
	if total != sum || n != int64(rep.Effects) {
		add("totals (%d over %d effects) disagree with the effect rows (%d over %d)", total, n, sum, rep.Effects)
	}
	if sum != want {
		add("effects sum to %d, want %d", sum, want)
	}
	rep.EffectsSum, rep.WantSum = sum, want
	pending, err := h.broker.pending(ctx)
	if err != nil {
		return err
	}
	if pending != 0 {
		add("%d messages left on the broker after the consumers stopped", pending)
	}
	return nil
}
