//go:build unix

package chaos

import (
	"bytes"
	"cmp"
	"context"
	"database/sql"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"
)

// The checker is deliberately its own code path: it reads the tables with plain SQL through
// database/sql (not gorm, not package record), parses results and stored HTTP responses itself, and
// trusts nothing the workers computed — only what the clients were answered (the load generator's
// log), what the workers reported doing (events) and what the database holds.

// checkScopes are the record scopes of the paths, as the checker expects them.
var checkScopes = map[string]string{PathExec: "chaos/exec", PathTx: "chaos/tx", PathHTTP: "POST /pay", PathMark: "chaos/mark", PathMarkExec: "chaos/markexec"}

// CheckInput is what [Check] verifies.
type CheckInput struct {
	// Driver is the database/sql driver of DSN: "mysql" (go-sql-driver/mysql, the default) or "pgx".
	Driver string
	// DSN of the database holding Tables.
	DSN    string
	Tables Tables
	// Accounts and InitialBalance of the business.
	Accounts       int
	InitialBalance int64
	// Answers is every request the load generator sent and what it was answered.
	Answers []Answer
	// Events are what the workers reported (fenced finishes, stale and adopted business writes).
	Events []Event
	// Faults are the injected faults (stalls are checked individually).
	Faults []FaultRecord
}

// CheckResult is what the checker found. Violations is empty when every invariant held.
type CheckResult struct {
	Keys           int   `json:"keys"`             // distinct keys requested
	Answers        int   `json:"answers"`          // client answers checked against the database
	Records        int   `json:"records"`          // record rows read
	Effects        int   `json:"effects"`          // ledger rows (business effects) checked
	SucceededKeys  int   `json:"succeeded_keys"`   // keys answered with a result
	RejectedKeys   int   `json:"rejected_keys"`    // keys answered with the permanent rejection
	ReExecutedKeys int   `json:"re_executed_keys"` // keys whose function ran and answered fresh more than once
	FencedChecked  int   `json:"fenced_checked"`   // fenced finishes checked
	StaleChecked   int   `json:"stale_checked"`    // stale business writes (refused by the fence) checked
	StallsChecked  int   `json:"stalls_checked"`   // stall faults checked
	LedgerTotal    int64 `json:"ledger_total"`     // sum of the applied transfers
	// MarkKilled counts the Mark-mode keys (PathMarkExec) whose worker was killed inside the function,
	// and MarkLost those marked done without their transfer — the at-most-once of Mark mode, each
	// explained by a kill or by an answer whose outcome was unknown (a reply lost to a restart).
	MarkKilled int `json:"mark_killed"`
	MarkLost   int `json:"mark_lost"`
	// Violations lists each broken invariant.
	Violations []Violation `json:"violations"`
}

// Violation is one broken invariant.
type Violation struct {
	Kind   string `json:"kind"` // one of the Violation... constants
	Detail string `json:"detail"`
}

func (v Violation) String() string { return v.Kind + ": " + v.Detail }

// Kinds of [Violation].
const (
	ViolationDuplicateEffect    = "duplicate-effect"    // a key took effect more than once
	ViolationDuplicateRecord    = "duplicate-record"    // more than one record per (scope, key)
	ViolationMissingEffect      = "missing-effect"      // answered with success, no effect
	ViolationLostWrite          = "lost-write"          // an effect its key's record does not refer to
	ViolationInconsistentAnswer = "inconsistent-answer" // an answer that disagrees with the stored result or the effect
	ViolationUnexpectedAnswer   = "unexpected-answer"   // a payload mismatch or an unclassifiable answer
	ViolationUnsettled          = "unsettled"           // a key that never got a result or rejection
	ViolationStuckProcessing    = "stuck-processing"    // a record left PROCESSING
	ViolationNotConserved       = "not-conserved"       // balances or ledger totals that do not add up
	ViolationStaleWrite         = "stale-write"         // a write of a fenced-out attempt that took effect
	ViolationFenced             = "fenced"              // a fenced finish that left the record where it was
	ViolationOrphan             = "orphan"              // a record or effect of a key nobody requested
	ViolationHarness            = "harness"             // the harness itself misbehaved (a worker crashed, ...)
)

type chkRecord struct {
	scope, key, status, owner, errText string
	fence, leaseUntil                  int64
	response                           []byte
}

type chkEffect struct {
	id, fence, amount int64
	key, path         string
	src, dst          int
}

type chkGate struct{ fence, ledgerID int64 }

// chkValue is a result as the workers' business produces it.
type chkValue struct {
	Op     string `json:"op"`
	Ledger int64  `json:"ledger"`
	Fence  int64  `json:"fence"`
	Amount int64  `json:"amount"`
}

// Check reads the tables after a run and verifies, independently of the code under test:
//
//   - at most one business effect (ledger row) per key, and exactly one for keys answered with a
//     result; none for keys answered with a rejection; one record per (scope, key);
//   - every client answer consistent with the stored record (same result bytes, same stored
//     response status and body, same rejection) and with the effect (ledger id, fence, amount);
//   - conserved sums: the balances add up to Accounts × InitialBalance, each balance equals its
//     initial balance plus the ledger's transfers, and the ledger's total equals the sum of the
//     operations answered with success;
//   - no record PROCESSING; every key settled (a terminal answer);
//   - no fenced write lost or duplicated: every effect is the one its key's SUCCEEDED record
//     refers to (an effect committed by an attempt that then lost its claim is adopted, not lost or
//     applied again), a fenced finish left the record at a newer fence, a business write refused
//     by the fence left no effect, and each stall's frozen attempt wrote nothing after the takeover.
//
// It returns an error only when it cannot read the database.
func Check(ctx context.Context, in CheckInput) (*CheckResult, error) {
	db, err := sql.Open(cmp.Or(in.Driver, "mysql"), in.DSN)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	recs, err := readRecords(ctx, db, in.Tables.Records)
	if err != nil {
		return nil, err
	}
	effects, err := readLedger(ctx, db, in.Tables.Ledger)
	if err != nil {
		return nil, err
	}
	gates, err := readGates(ctx, db, in.Tables.Gate)
	if err != nil {
		return nil, err
	}
	balances, err := readBalances(ctx, db, in.Tables.Accounts)
	if err != nil {
		return nil, err
	}
	return evaluate(in, recs, effects, gates, balances), nil
}

// keyView is everything the clients saw of one key.
type keyView struct {
	path, key string
	op        Op
	answers   []Answer
	success   []Answer
	rejects   []Answer
	dups      []Answer // ErrDuplicate answers (the mark paths)
	// killed: a worker was killed inside this key's business function (a worker_kill fault).
	killed bool
}

func evaluate(in CheckInput, recs []chkRecord, effects []chkEffect, gates map[string]chkGate, balances map[int]int64) *CheckResult {
	r := &CheckResult{Records: len(recs), Effects: len(effects), Answers: len(in.Answers)}
	violate := func(kind, format string, args ...any) {
		r.Violations = append(r.Violations, Violation{Kind: kind, Detail: fmt.Sprintf(format, args...)})
	}
	totalMoney := in.InitialBalance * int64(in.Accounts)

	// What the clients saw, per key.
	views := map[string]*keyView{}
	for _, a := range in.Answers {
		v := views[a.Key]
		if v == nil {
			v = &keyView{path: a.Path, key: a.Key, op: a.Op}
			views[a.Key] = v
		}
		if a.Path != v.path || a.Op != v.op {
			violate(ViolationHarness, "key %s sent with two paths or payloads (%s %+v, %s %+v)", a.Key, v.path, v.op, a.Path, a.Op)
		}
		v.answers = append(v.answers, a)
		switch a.Class {
		case ClassOK, ClassReplay:
			v.success = append(v.success, a)
		case ClassRejected:
			v.rejects = append(v.rejects, a)
		case ClassDuplicate:
			v.dups = append(v.dups, a)
		case ClassMismatch, ClassError:
			violate(ViolationUnexpectedAnswer, "unexpected answer to %s (request %d, worker %s): %s %s", a.Key, a.Seq, a.Worker, a.Class, a.Error)
		}
	}
	r.Keys = len(views)
	for _, f := range in.Faults {
		if v := views[f.Key]; f.Kind == FaultWorkerKill && f.Injected && v != nil {
			v.killed = true
		}
	}

	// Records: one per (scope, key), none PROCESSING, none for keys nobody asked for.
	recBy := map[[2]string][]chkRecord{}
	for _, rec := range recs {
		k := [2]string{rec.scope, rec.key}
		recBy[k] = append(recBy[k], rec)
		if rec.status == "PROCESSING" {
			violate(ViolationStuckProcessing, "record %s %s stuck PROCESSING (fence %d, lease until %s)", rec.scope, rec.key, rec.fence, time.UnixMilli(rec.leaseUntil).Format(time.TimeOnly))
		}
		if v := views[rec.key]; v == nil || checkScopes[v.path] != rec.scope {
			violate(ViolationOrphan, "record %s %s belongs to no request", rec.scope, rec.key)
		}
	}
	for k, rs := range recBy {
		if len(rs) > 1 {
			violate(ViolationDuplicateRecord, "duplicate records: %d rows for %s %s (the unique index did not hold)", len(rs), k[0], k[1])
		}
	}

	// Effects: at most one per key, each matching its request.
	effBy := map[string][]chkEffect{}
	for _, e := range effects {
		effBy[e.key] = append(effBy[e.key], e)
		r.LedgerTotal += e.amount
		v := views[e.key]
		switch {
		case v == nil:
			violate(ViolationOrphan, "effect %d for key %s, which was never requested", e.id, e.key)
		case e.path != v.path || e.src != v.op.Src || e.dst != v.op.Dst || e.amount != v.op.Amount:
			violate(ViolationInconsistentAnswer, "effect %d of %s does not match its request: %s %d>%d:%d, requested %s %+v", e.id, e.key, e.path, e.src, e.dst, e.amount, v.path, v.op)
		}
	}
	for key, es := range effBy {
		if len(es) > 1 {
			desc := make([]string, len(es))
			for i, e := range es {
				desc[i] = fmt.Sprintf("ledger %d fence %d", e.id, e.fence)
			}
			violate(ViolationDuplicateEffect, "duplicate effect: key %s applied %d times (%v)", key, len(es), desc)
		}
	}

	// Per key: answers against records and effects.
	keys := make([]string, 0, len(views))
	for k := range views {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var successTotal int64
	successKeys := 0
	for _, key := range keys {
		v := views[key]
		scope := checkScopes[v.path]
		var rec *chkRecord
		if rs := recBy[[2]string{scope, key}]; len(rs) > 0 {
			rec = &rs[0]
		}
		effs := effBy[key]
		if v.path == PathMark {
			if markChecked(v, rec, effs, totalMoney, violate) {
				r.SucceededKeys++
				successKeys++
				successTotal += v.op.Amount
			}
			continue
		}
		if v.path == PathMarkExec {
			g, hasGate := gates[key]
			switch markExecChecked(v, rec, effs, g, hasGate, violate) {
			case markApplied:
				r.SucceededKeys++
				successKeys++
				successTotal += v.op.Amount
			case markRejected:
				r.RejectedKeys++
			case markLost:
				r.MarkLost++
			}
			if v.killed {
				r.MarkKilled++
			}
			continue
		}
		fresh := 0
		for _, a := range v.success {
			if a.Class == ClassOK {
				fresh++
			}
		}
		if fresh > 1 {
			r.ReExecutedKeys++
		}
		switch {
		case len(v.success) == 0 && len(v.rejects) == 0:
			violate(ViolationUnsettled, "key %s never settled: %d requests, no result or rejection", key, len(v.answers))
		case len(v.success) > 0 && len(v.rejects) > 0:
			violate(ViolationInconsistentAnswer, "key %s answered both with a result (request %d) and a rejection (request %d)", key, v.success[0].Seq, v.rejects[0].Seq)
		}
		if len(v.success) > 0 {
			r.SucceededKeys++
			successKeys++
			successTotal += v.op.Amount
			first := v.success[0]
			for _, a := range v.success[1:] {
				if a.Value != first.Value {
					violate(ViolationInconsistentAnswer, "key %s answered two different results: %q (request %d) and %q (request %d)", key, first.Value, first.Seq, a.Value, a.Seq)
				}
			}
			if v.op.Amount > totalMoney {
				violate(ViolationInconsistentAnswer, "key %s: an overdraft of %d was answered with success", key, v.op.Amount)
			}
			if len(effs) != 1 {
				violate(ViolationMissingEffect, "key %s answered with a result but has %d effects", key, len(effs))
			}
			val, err := parseValue([]byte(first.Value))
			switch {
			case err != nil:
				violate(ViolationInconsistentAnswer, "key %s: unreadable result %q: %v", key, first.Value, err)
			case val.Op != key:
				violate(ViolationInconsistentAnswer, "key %s answered the result of %s", key, val.Op)
			case len(effs) == 1 && (val.Ledger != effs[0].id || val.Fence != effs[0].fence || val.Amount != effs[0].amount):
				violate(ViolationInconsistentAnswer, "key %s answered %+v, but its effect is ledger %d fence %d amount %d", key, val, effs[0].id, effs[0].fence, effs[0].amount)
			}
			for _, a := range v.success {
				if msg := storedMatches(rec, v.path, a); msg != "" {
					violate(ViolationInconsistentAnswer, "key %s: answer to request %d (%s) inconsistent with the stored result: %s", key, a.Seq, a.Class, msg)
				}
			}
		}
		if len(v.rejects) > 0 {
			r.RejectedKeys++
			if len(effs) != 0 {
				violate(ViolationInconsistentAnswer, "key %s answered with a rejection but has %d effects", key, len(effs))
			}
			for _, a := range v.rejects {
				if msg := storedMatches(rec, v.path, a); msg != "" {
					violate(ViolationInconsistentAnswer, "key %s: rejection of request %d inconsistent with the stored result: %s", key, a.Seq, msg)
				}
			}
		}
		// Every effect is the one the key's record refers to: nothing applied and then lost.
		for _, e := range effs {
			if rec == nil {
				violate(ViolationLostWrite, "key %s: effect %d (fence %d) without a record", key, e.id, e.fence)
				continue
			}
			if rec.fence < e.fence {
				violate(ViolationLostWrite, "key %s: effect %d has fence %d, above its record's %d", key, e.id, e.fence, rec.fence)
			}
			if id, ok := recordedLedger(rec, v.path); !ok || id != e.id {
				violate(ViolationLostWrite, "key %s: effect %d (fence %d) is not the record's result (record %s fence %d): a write was lost", key, e.id, e.fence, rec.status, rec.fence)
			}
		}
		if v.path != PathTx && len(effs) == 1 {
			g, ok := gates[key]
			switch {
			case !ok || g.ledgerID != effs[0].id:
				violate(ViolationLostWrite, "key %s: fence register points at ledger %d, the effect is %d", key, g.ledgerID, effs[0].id)
			case rec != nil && g.fence > rec.fence:
				violate(ViolationFenced, "key %s: fence register at %d is ahead of its record's fence %d", key, g.fence, rec.fence)
			}
		}
	}

	// Fenced finishes and stale business writes, as the workers reported them.
	for _, e := range in.Events {
		if e.Word != "EVENT" {
			continue
		}
		scope := checkScopes[e.Path]
		var rec *chkRecord
		if rs := recBy[[2]string{scope, e.Key}]; len(rs) > 0 {
			rec = &rs[0]
		}
		switch e.Kind {
		case "fenced":
			r.FencedChecked++
			if rec != nil && rec.fence <= e.Fence {
				violate(ViolationFenced, "key %s: a finish at fence %d was fenced, but the record is at fence %d", e.Key, e.Fence, rec.fence)
			}
		case "stale":
			r.StaleChecked++
			for _, eff := range effBy[e.Key] {
				if eff.fence == e.Fence {
					violate(ViolationStaleWrite, "key %s: the business write of fence %d was refused as stale, yet effect %d carries that fence", e.Key, e.Fence, eff.id)
				}
			}
		}
	}
	for _, f := range in.Faults {
		if f.Kind != FaultWorkerStall || !f.Injected || f.Key == "" {
			continue
		}
		r.StallsChecked++
		if f.Path == PathMarkExec {
			// A mark has no lease: frozen past LockTTL, it still holds its key, and the retry is a
			// duplicate. A takeover that ran means two attempts ran the function of one mark.
			if f.TakeoverClass != "" && f.TakeoverClass != ClassDuplicate {
				violate(ViolationInconsistentAnswer, "stall of %s (Mark mode): the retry while the mark's function was frozen (fence %d) was answered %s, not as a duplicate",
					f.Key, f.StaleFence, f.TakeoverClass)
			}
			continue
		}
		if f.TakeoverClass == ClassOK || f.TakeoverClass == ClassReplay {
			for _, eff := range effBy[f.Key] {
				if eff.fence == f.StaleFence {
					violate(ViolationStaleWrite, "stall of %s: the frozen attempt (fence %d) applied effect %d although the key was taken over", f.Key, f.StaleFence, eff.id)
				}
			}
			if f.StaleOutcome == string(bizApplied) {
				violate(ViolationStaleWrite, "stall of %s: the frozen attempt (fence %d) applied its write after the takeover", f.Key, f.StaleFence)
			}
		}
	}

	// Conserved sums.
	var sum int64
	for _, b := range balances {
		sum += b
	}
	if len(balances) != in.Accounts {
		violate(ViolationNotConserved, "%d accounts, want %d", len(balances), in.Accounts)
	}
	if sum != totalMoney {
		violate(ViolationNotConserved, "money not conserved: balances add up to %d, want %d", sum, totalMoney)
	}
	want := map[int]int64{}
	for id := range balances {
		want[id] = in.InitialBalance
	}
	for _, e := range effects {
		want[e.src] -= e.amount
		want[e.dst] += e.amount
	}
	for id, b := range balances {
		if b != want[id] {
			violate(ViolationNotConserved, "account %d holds %d, but its initial balance and the ledger say %d", id, b, want[id])
		}
	}
	if r.LedgerTotal != successTotal || len(effects) != successKeys {
		violate(ViolationNotConserved, "the ledger holds %d transfers totalling %d, but %d operations totalling %d were answered with success",
			len(effects), r.LedgerTotal, successKeys, successTotal)
	}
	return r
}

// markChecked checks a key of the mark path (TxMark) and reports whether it took effect. A mark keeps
// no result and no rejection, so the invariants are those of the transaction: the mark and the
// transfer commit together or not at all — a mark without its effect would have duplicates told
// "done" for nothing, an effect without its mark would run again — a fresh success is answered at
// most once and with the effect's own values, a duplicate is answered only for a marked key, and every
// key ends marked or refused. A refusal is not stored, so a key may be refused (its source account
// short of funds at the time) and succeed on a later retry.
func markChecked(v *keyView, rec *chkRecord, effs []chkEffect, totalMoney int64, violate func(kind, format string, args ...any)) bool {
	key := v.key
	fresh := markAnswers(v, "a mark", violate)
	if len(fresh) > 1 {
		violate(ViolationDuplicateEffect, "key %s: the business ran and committed for requests %d and %d", key, fresh[0].Seq, fresh[1].Seq)
	}
	marked := rec != nil && rec.status == "SUCCEEDED"
	switch {
	case rec != nil && !marked:
		violate(ViolationInconsistentAnswer, "key %s: mark record %s, want SUCCEEDED or none", key, rec.status)
	case marked && len(effs) != 1:
		violate(ViolationLostWrite, "key %s: marked (fence %d) with %d effects: the mark and the transfer did not commit together", key, rec.fence, len(effs))
	case !marked && len(effs) > 0:
		violate(ViolationLostWrite, "key %s: effect %d (fence %d) without its mark: a retry would apply it again", key, effs[0].id, effs[0].fence)
	case marked && rec.fence != effs[0].fence:
		violate(ViolationLostWrite, "key %s: effect %d has fence %d, its mark %d: not the same transaction", key, effs[0].id, effs[0].fence, rec.fence)
	}
	if (len(fresh) > 0 || len(v.dups) > 0) && !marked {
		violate(ViolationMissingEffect, "key %s answered as done (%d successes, %d duplicates) but is not marked", key, len(fresh), len(v.dups))
	}
	if len(fresh) > 0 {
		if v.op.Amount > totalMoney {
			violate(ViolationInconsistentAnswer, "key %s: an overdraft of %d was answered with success", key, v.op.Amount)
		}
		val, err := parseValue([]byte(fresh[0].Value))
		switch {
		case err != nil:
			violate(ViolationInconsistentAnswer, "key %s: unreadable result %q: %v", key, fresh[0].Value, err)
		case val.Op != key:
			violate(ViolationInconsistentAnswer, "key %s answered the result of %s", key, val.Op)
		case len(effs) == 1 && (val.Ledger != effs[0].id || val.Fence != effs[0].fence || val.Amount != effs[0].amount):
			violate(ViolationInconsistentAnswer, "key %s answered %+v, but its effect is ledger %d fence %d amount %d", key, val, effs[0].id, effs[0].fence, effs[0].amount)
		}
	}
	return marked
}

// markOutcome is what became of a Mark-mode key.
type markOutcome int

const (
	markNone     markOutcome = iota // nothing checkable (a violation was reported)
	markApplied                     // marked SUCCEEDED with its transfer
	markRejected                    // marked REJECTED, no transfer
	markLost                        // marked SUCCEEDED without its transfer (a crash or a lost reply)
)

// markExecChecked checks a key of Mark mode (guard.Mark, PathMarkExec) and reports what became of
// it. The mark is written SUCCEEDED before the function and keeps no result; the function's fenced
// transfer commits apart from it. So Mark promises, and the checker verifies:
//
//   - at most one transfer per key (checked for every path), and none for a REJECTED key;
//   - the key ends marked: SUCCEEDED or REJECTED — a retryable failure finishes it FAILED, and the
//     settling retry takes it over — with a record for every answer that says it is done;
//   - a fresh success (ClassOK) carries the transfer's own values (ledger id, fence, amount), and at
//     most one request is answered so: a marked key's duplicates get ErrDuplicate (ClassDuplicate, or
//     in flight while the lock holder runs), never a stored value (no ClassReplay);
//   - a rejection is answered with the error text the REJECTED mark stores (its duplicates get
//     ErrDuplicate: a mark replays nothing), and never for a key that took effect;
//   - the transfer was made under the mark's claim or an earlier one (its fence no higher than the
//     mark's) and is the one the fence register points at, whose fence is no higher than the mark's.
//
// And what it does not promise: a crash inside the function leaves the key marked without its
// transfer, and so may a claim whose reply was lost (a database restart) — Mark is at most once. Such
// a key is accepted only when a worker was killed inside its function or one of its answers left the
// outcome unknown (unavailable, no answer, fenced); it must then have no success answer.
func markExecChecked(v *keyView, rec *chkRecord, effs []chkEffect, g chkGate, hasGate bool, violate func(kind, format string, args ...any)) markOutcome {
	key := v.key
	fresh := markAnswers(v, "Mark mode", violate)
	if len(fresh) > 1 {
		violate(ViolationDuplicateEffect, "key %s (Mark mode): the function ran to success for requests %d and %d: a duplicate of a marked key ran", key, fresh[0].Seq, fresh[1].Seq)
	}
	if len(fresh) > 0 && len(v.rejects) > 0 {
		violate(ViolationInconsistentAnswer, "key %s answered both with a result (request %d) and a rejection (request %d)", key, fresh[0].Seq, v.rejects[0].Seq)
	}
	if rec == nil {
		if len(v.success)+len(v.dups)+len(v.rejects) > 0 || len(effs) > 0 {
			violate(ViolationMissingEffect, "key %s (Mark mode) answered as done (%d successes, %d duplicates, %d rejections) or applied (%d effects), but has no mark",
				key, len(v.success), len(v.dups), len(v.rejects), len(effs))
		}
		return markNone
	}
	for _, e := range effs {
		if e.fence > rec.fence {
			violate(ViolationLostWrite, "key %s: effect %d has fence %d, above its mark's %d", key, e.id, e.fence, rec.fence)
		}
	}
	if len(effs) == 1 {
		switch {
		case !hasGate || g.ledgerID != effs[0].id:
			violate(ViolationLostWrite, "key %s: fence register points at ledger %d, the effect is %d", key, g.ledgerID, effs[0].id)
		case g.fence > rec.fence:
			violate(ViolationFenced, "key %s: fence register at %d is ahead of its mark's fence %d", key, g.fence, rec.fence)
		}
	}
	for _, a := range fresh {
		val, err := parseValue([]byte(a.Value))
		switch {
		case err != nil:
			violate(ViolationInconsistentAnswer, "key %s: unreadable result %q: %v", key, a.Value, err)
		case val.Op != key:
			violate(ViolationInconsistentAnswer, "key %s answered the result of %s", key, val.Op)
		case len(effs) != 1:
			violate(ViolationMissingEffect, "key %s answered with a result (request %d) but has %d effects", key, a.Seq, len(effs))
		case val.Ledger != effs[0].id || val.Fence != effs[0].fence || val.Amount != effs[0].amount:
			violate(ViolationInconsistentAnswer, "key %s answered %+v, but its effect is ledger %d fence %d amount %d", key, val, effs[0].id, effs[0].fence, effs[0].amount)
		}
	}
	switch rec.status {
	case "REJECTED":
		if len(effs) != 0 {
			violate(ViolationInconsistentAnswer, "key %s: mark REJECTED (%q) but the transfer took effect %d times", key, rec.errText, len(effs))
		}
		for _, a := range v.rejects {
			if a.Value != rec.errText {
				violate(ViolationInconsistentAnswer, "key %s: rejection of request %d %q, but the mark stores %q", key, a.Seq, a.Value, rec.errText)
			}
		}
		if len(fresh) > 0 {
			violate(ViolationInconsistentAnswer, "key %s: answered with a result (request %d) but its mark is REJECTED", key, fresh[0].Seq)
		}
		return markRejected
	case "SUCCEEDED":
	default:
		violate(ViolationInconsistentAnswer, "key %s: mark %s at the end (fence %d), want SUCCEEDED or REJECTED: the key was answered as settled while it was not", key, rec.status, rec.fence)
		return markNone
	}
	if len(v.rejects) > 0 {
		violate(ViolationInconsistentAnswer, "key %s: rejection of request %d, but its mark is SUCCEEDED", key, v.rejects[0].Seq)
	}
	if len(effs) == 1 {
		return markApplied
	}
	if len(effs) > 1 {
		return markNone // reported as a duplicate effect
	}
	// Marked done, nothing applied: the at-most-once of Mark mode, which a crash inside the
	// function or a lost reply explains, and nothing else.
	unknown := v.killed
	for _, a := range v.answers {
		unknown = unknown || a.Class == ClassUnavailable || a.Class == ClassTransport || a.Class == ClassFenced
	}
	if !unknown {
		violate(ViolationMissingEffect, "key %s: marked SUCCEEDED (fence %d) without its transfer, and no kill or unknown outcome explains it (%d requests)", key, rec.fence, len(v.answers))
	}
	return markLost
}

// storedMatches compares an answer with the stored record; it returns "" when they agree.
func storedMatches(rec *chkRecord, path string, a Answer) string {
	if rec == nil {
		return "no record"
	}
	if path == PathHTTP {
		if rec.status != "SUCCEEDED" {
			return "record is " + rec.status
		}
		status, body, err := decodeStoredHTTP(rec.response)
		if err != nil {
			return err.Error()
		}
		if status != a.Status || string(body) != a.Value {
			return fmt.Sprintf("stored %d %q, answered %d %q", status, body, a.Status, a.Value)
		}
		return ""
	}
	switch a.Class {
	case ClassRejected:
		if rec.status != "REJECTED" || rec.errText != a.Value {
			return fmt.Sprintf("record %s %q, answered rejection %q", rec.status, rec.errText, a.Value)
		}
	default:
		if rec.status != "SUCCEEDED" || string(rec.response) != a.Value {
			return fmt.Sprintf("record %s %q, answered %q", rec.status, rec.response, a.Value)
		}
	}
	return ""
}

// recordedLedger returns the ledger id a SUCCEEDED record's result refers to.
func recordedLedger(rec *chkRecord, path string) (int64, bool) {
	if rec.status != "SUCCEEDED" {
		return 0, false
	}
	raw := rec.response
	if path == PathHTTP {
		status, body, err := decodeStoredHTTP(raw)
		if err != nil || status != 201 {
			return 0, false
		}
		raw = body
	}
	v, err := parseValue(raw)
	if err != nil {
		return 0, false
	}
	return v.Ledger, true
}

func parseValue(b []byte) (chkValue, error) {
	var v chkValue
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		return v, err
	}
	if v.Op == "" || v.Ledger <= 0 || v.Fence <= 0 {
		return v, fmt.Errorf("incomplete result %q", b)
	}
	return v, nil
}

// decodeStoredHTTP reads the status and body of a response stored by the httpx middleware, whose
// format (version 1, or 2) is: version byte, flags byte (bit 0: body omitted), uvarint status,
// uvarint header count, each header as uvarint-length-prefixed name and value (version 2: preceded
// by an op byte, 0 add or 1 clear, and a clear has no value), then the body.
func decodeStoredHTTP(b []byte) (int, []byte, error) {
	bad := func(what string) (int, []byte, error) {
		return 0, nil, errors.New("stored HTTP response: " + what)
	}
	if len(b) < 2 || b[0] != 1 && b[0] != 2 {
		return bad("unknown format")
	}
	format := b[0] // 2: each header field starts with an op byte, 0 add (name, value), 1 clear (name)
	if b[1]&1 != 0 {
		return bad("body not stored")
	}
	b = b[2:]
	status, n := binary.Uvarint(b)
	if n <= 0 {
		return bad("status")
	}
	b = b[n:]
	fields, n := binary.Uvarint(b)
	if n <= 0 || fields > 1024 {
		return bad("header count")
	}
	b = b[n:]
	for range fields {
		parts := 2
		if format == 2 {
			if len(b) == 0 || b[0] > 1 {
				return bad("header op")
			}
			parts -= int(b[0]) // a clear has a name only
			b = b[1:]
		}
		for range parts {
			l, n := binary.Uvarint(b)
			if n <= 0 || uint64(len(b)-n) < l {
				return bad("header")
			}
			b = b[n+int(l):]
		}
	}
	return int(status), b, nil
}

func readRecords(ctx context.Context, db *sql.DB, table string) ([]chkRecord, error) {
	rows, err := db.QueryContext(ctx, "SELECT scope, idem_key, status, fence, owner, response, error, lease_until FROM "+table)
	if err != nil {
		return nil, fmt.Errorf("checker: reading records: %w", err)
	}
	defer rows.Close()
	var out []chkRecord
	for rows.Next() {
		var r chkRecord
		if err := rows.Scan(&r.scope, &r.key, &r.status, &r.fence, &r.owner, &r.response, &r.errText, &r.leaseUntil); err != nil {
			return nil, fmt.Errorf("checker: reading records: %w", err)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

func readLedger(ctx context.Context, db *sql.DB, table string) ([]chkEffect, error) {
	rows, err := db.QueryContext(ctx, "SELECT id, op_key, path, fence, src, dst, amount FROM "+table+" ORDER BY id")
	if err != nil {
		return nil, fmt.Errorf("checker: reading the ledger: %w", err)
	}
	defer rows.Close()
	var out []chkEffect
	for rows.Next() {
		var e chkEffect
		if err := rows.Scan(&e.id, &e.key, &e.path, &e.fence, &e.src, &e.dst, &e.amount); err != nil {
			return nil, fmt.Errorf("checker: reading the ledger: %w", err)
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

func readGates(ctx context.Context, db *sql.DB, table string) (map[string]chkGate, error) {
	rows, err := db.QueryContext(ctx, "SELECT op_key, fence, ledger_id FROM "+table)
	if err != nil {
		return nil, fmt.Errorf("checker: reading the fence register: %w", err)
	}
	defer rows.Close()
	out := map[string]chkGate{}
	for rows.Next() {
		var k string
		var g chkGate
		if err := rows.Scan(&k, &g.fence, &g.ledgerID); err != nil {
			return nil, fmt.Errorf("checker: reading the fence register: %w", err)
		}
		out[k] = g
	}
	return out, rows.Err()
}

func readBalances(ctx context.Context, db *sql.DB, table string) (map[int]int64, error) {
	rows, err := db.QueryContext(ctx, "SELECT id, balance FROM "+table)
	if err != nil {
		return nil, fmt.Errorf("checker: reading accounts: %w", err)
	}
	defer rows.Close()
	out := map[int]int64{}
	for rows.Next() {
		var id int
		var b int64
		if err := rows.Scan(&id, &b); err != nil {
			return nil, fmt.Errorf("checker: reading accounts: %w", err)
		}
		out[id] = b
	}
	return out, rows.Err()
}

// countProcessing returns the records PROCESSING now, for the sweeper check.
func countProcessing(ctx context.Context, driver, dsn, table string) (int, error) {
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	var n int
	err = db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+table+" WHERE status = 'PROCESSING'").Scan(&n)
	return n, err
}

// markAnswers checks what every mark path's key must show — it settled, and no success answer is a
// replay (a mark replays nothing) — and returns its fresh successes. what names the path.
func markAnswers(v *keyView, what string, violate func(kind, format string, args ...any)) (fresh []Answer) {
	if len(v.success) == 0 && len(v.dups) == 0 && len(v.rejects) == 0 {
		violate(ViolationUnsettled, "key %s never settled: %d requests, no success, duplicate or rejection", v.key, len(v.answers))
	}
	for _, a := range v.success {
		if a.Class == ClassOK {
			fresh = append(fresh, a)
		} else {
			violate(ViolationUnexpectedAnswer, "key %s (%s) answered a replay (request %d): a mark replays nothing", v.key, what, a.Seq)
		}
	}
	return fresh
}
