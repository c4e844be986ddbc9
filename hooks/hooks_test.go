package hooks_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/idemtest"
	"github.com/idemkit/idemkit/memory"
	"github.com/idemkit/idemkit/txstatus"
)

var ctxb = context.Background()

// journal records user hook calls per gid.
type journal struct {
	mu    sync.Mutex
	calls []string
	fail  error
}

func (j *journal) add(s string) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.calls = append(j.calls, s)
	return j.fail
}

func (j *journal) list() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]string(nil), j.calls...)
}

type bundle struct {
	lc    *hooks.Lifecycle
	g     *idemkit.Guard
	store *memory.Store
	clock *idemtest.Clock
	j     *journal
}

func setup(t *testing.T) *bundle {
	t.Helper()
	b := &bundle{store: memory.NewStore(), clock: idemtest.NewClock(), j: &journal{}}
	g, err := idemkit.New(b.store, &idemkit.Options{Lease: time.Second, Now: b.clock.Now, Locker: memory.NewLocker(nil)})
	if err != nil {
		t.Fatal(err)
	}
	b.g = g
	b.lc = &hooks.Lifecycle{
		Guard: g,
		Before: hooks.BeforeTransactionFunc(func(ctx context.Context, t *hooks.Txn) error {
			return b.j.add("before " + t.GID)
		}),
		OnCommit: hooks.CommitFunc(func(ctx context.Context, t *hooks.Txn, result []byte) error {
			return b.j.add("commit " + t.GID)
		}),
		OnRollback: hooks.RollbackFunc(func(ctx context.Context, t *hooks.Txn, reason error) error {
			return b.j.add("rollback " + t.GID)
		}),
	}
	return b
}

func (b *bundle) status(t *testing.T, key string) *idemkit.Record {
	t.Helper()
	rec, err := b.g.Get(ctxb, "create-order", key)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func call(key string) idemkit.Call { return idemkit.Call{Scope: "create-order", Key: key} }

func TestCommitAndReplay(t *testing.T) {
	b := setup(t)
	txn, _, err := b.lc.Begin(ctxb, "saga", "gid-1", call("k1"))
	if err != nil {
		t.Fatal(err)
	}
	if rec := b.status(t, "k1"); rec.Status != idemkit.StatusProcessing || rec.GID != "gid-1" {
		t.Fatalf("before the transaction: %+v", rec)
	}
	// A duplicate while the transaction runs is in flight and starts nothing.
	if _, _, err := b.lc.Begin(ctxb, "saga", "gid-2", call("k1")); !errors.Is(err, idemkit.ErrInFlight) {
		t.Fatalf("duplicate: %v", err)
	}
	if err := b.lc.Commit(ctxb, txn, []byte(`{"status":"PAID"}`)); err != nil {
		t.Fatal(err)
	}
	if rec := b.status(t, "k1"); rec.Status != idemkit.StatusSucceeded || string(rec.Response) != `{"status":"PAID"}` {
		t.Fatalf("after commit: %+v", rec)
	}
	txn2, res, err := b.lc.Begin(ctxb, "saga", "gid-3", call("k1"))
	if txn2 != nil || err != nil || !res.Replayed || string(res.Value) != `{"status":"PAID"}` {
		t.Fatalf("retry after commit: %v %+v %v", txn2, res, err)
	}
	if got := b.j.list(); len(got) != 2 || got[0] != "before gid-1" || got[1] != "commit gid-1" {
		t.Fatalf("hooks ran: %v", got)
	}
}

func TestRollbackAllowsRetry(t *testing.T) {
	b := setup(t)
	txn, _, err := b.lc.Begin(ctxb, "saga", "gid-1", call("k"))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.lc.Rollback(ctxb, txn, nil); err != nil {
		t.Fatal(err)
	}
	if rec := b.status(t, "k"); rec.Status != idemkit.StatusFailed {
		t.Fatalf("after rollback: %+v", rec)
	}
	txn, _, err = b.lc.Begin(ctxb, "saga", "gid-2", call("k"))
	if err != nil || txn.Record.Fence != 2 || txn.Record.GID != "gid-2" {
		t.Fatalf("retry: %+v %v", txn, err)
	}
}

func TestBeforeHookFailureReleasesKey(t *testing.T) {
	b := setup(t)
	b.j.fail = errors.New("order table down")
	if _, _, err := b.lc.Begin(ctxb, "saga", "gid-1", call("k")); err == nil {
		t.Fatal("Begin succeeded although the hook failed")
	}
	if rec := b.status(t, "k"); rec.Status != idemkit.StatusFailed {
		t.Fatalf("after a failing hook: %+v", rec)
	}
}

func TestReconcilerSettlesDetached(t *testing.T) {
	b := setup(t)
	statuses := map[string]txstatus.Status{
		"g-ok": txstatus.Succeed, "g-failed": txstatus.Failed, "g-lost": txstatus.Unknown, "g-running": txstatus.Submitted,
	}
	for gid := range statuses {
		txn, _, err := b.lc.Begin(ctxb, "saga", gid, call("key-"+gid))
		if err != nil {
			t.Fatal(err)
		}
		b.lc.Detach(ctxb, txn) // the initiator could not wait for the outcome, or died
	}
	m := &fakeManager{statuses: statuses}
	r := &hooks.Reconciler{Lifecycle: b.lc, Scopes: []string{"create-order"}, Manager: m}
	// Within the lease nothing is pending.
	if n, err := r.RunOnce(ctxb, b.clock.Now(), 100); n != 0 || err != nil {
		t.Fatalf("within the lease: %d %v", n, err)
	}
	b.clock.Advance(2 * time.Second)
	n, err := r.RunOnce(ctxb, b.clock.Now(), 100)
	if n != 3 || err != nil {
		t.Fatalf("settled %d, %v; want 3", n, err)
	}
	want := map[string]idemkit.Status{
		"g-ok": idemkit.StatusSucceeded, "g-failed": idemkit.StatusFailed, "g-lost": idemkit.StatusFailed, "g-running": idemkit.StatusProcessing,
	}
	for gid, st := range want {
		if rec := b.status(t, "key-"+gid); rec.Status != st {
			t.Errorf("%s: %s, want %s", gid, rec.Status, st)
		}
	}
	// Once the last one succeeds, the next pass settles it.
	m.set("g-running", txstatus.Succeed)
	if n, err := r.RunOnce(ctxb, b.clock.Now(), 100); n != 1 || err != nil {
		t.Fatalf("second pass: %d %v", n, err)
	}
	calls := b.j.list()
	commits := 0
	for _, c := range calls {
		if c == "commit g-ok" || c == "commit g-running" {
			commits++
		}
	}
	if commits != 2 {
		t.Fatalf("user hooks: %v", calls)
	}
}

func TestReconcilerLosesRaceGracefully(t *testing.T) {
	b := setup(t)
	txn, _, err := b.lc.Begin(ctxb, "saga", "g", call("k"))
	if err != nil {
		t.Fatal(err)
	}
	b.clock.Advance(2 * time.Second)
	pending, _ := b.lc.Guard.Pending(ctxb, b.clock.Now(), 10, "create-order")
	// The initiator finishes after the reconciler listed the record but before it settles it.
	if err := b.lc.Commit(ctxb, txn, []byte("v")); err != nil {
		t.Fatal(err)
	}
	stale := &hooks.Txn{GID: "g", Record: *pending[0]}
	if err := b.lc.Rollback(ctxb, stale, nil); !errors.Is(err, idemkit.ErrFenced) {
		t.Fatalf("stale settle: %v, want ErrFenced", err)
	}
	if rec := b.status(t, "k"); rec.Status != idemkit.StatusSucceeded {
		t.Fatalf("%+v", rec)
	}
}

// TestRunAfterReconcilerSettledFirst: the initiator's wait outlives its claim's lease and a Reconciler
// settles the record from the same final status before the initiator does. The initiator's own settle
// is then fenced, but the transaction succeeded and the record says so: Run reports the outcome, not
// an error.
func TestRunAfterReconcilerSettledFirst(t *testing.T) {
	b := setup(t)
	dtm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"transaction":{"status":"succeed"}}`))
	}))
	defer dtm.Close()
	status := &txstatus.Client{Server: dtm.URL, PollInterval: time.Millisecond}
	r := &hooks.Reconciler{Lifecycle: b.lc, Scopes: []string{"create-order"}, Manager: status}
	out, err := b.lc.Run(ctxb, hooks.RunParams{
		TransType: "saga",
		Call:      call("k"),
		Status:    status,
		Wait:      time.Second,
		Result:    []byte("v"),
		Start: func(ctx context.Context, gid string) error {
			b.clock.Advance(2 * time.Second) // past the lease: the record is pending
			if n, err := r.RunOnce(ctx, b.clock.Now(), 10); n != 1 || err != nil {
				t.Errorf("reconciler settled %d, %v", n, err)
			}
			return nil
		},
	})
	if err != nil || out.Status != txstatus.Succeed {
		t.Fatalf("Run = %+v, %v", out, err)
	}
	if rec := b.status(t, "k"); rec.Status != idemkit.StatusSucceeded {
		t.Fatalf("%+v", rec)
	}
}

// TestRunStartFailures: a start refused by the manager rolls the record back at once (the key is free
// again); a start lost in transit (timeout, dropped connection) is left PROCESSING, because the manager
// may still record it, and the Reconciler settles it after the lease.
func TestRunStartFailures(t *testing.T) {
	dtm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"branches":[],"transaction":null}`))
	}))
	defer dtm.Close()
	status := &txstatus.Client{Server: dtm.URL}

	b := setup(t)
	out, err := b.lc.Run(ctxb, hooks.RunParams{TransType: "saga", Call: call("refused"), Status: status,
		Start: func(context.Context, string) error {
			return &txstatus.RefusedError{Op: "submit", Message: "invalid saga"}
		}})
	if err != nil || out.Status != txstatus.Failed || out.Reason == nil {
		t.Fatalf("refused start: %+v, %v", out, err)
	}
	if rec := b.status(t, "refused"); rec.Status != idemkit.StatusFailed {
		t.Fatalf("refused start left %s", rec.Status)
	}

	lost := &url.Error{Op: "Post", URL: dtm.URL + "/submit", Err: errors.New("i/o timeout")}
	out, err = b.lc.Run(ctxb, hooks.RunParams{TransType: "saga", Call: call("lost"), Status: status,
		Start: func(context.Context, string) error { return lost }})
	if !errors.Is(err, lost) || out.GID == "" {
		t.Fatalf("lost start: %+v, %v", out, err)
	}
	if rec := b.status(t, "lost"); rec.Status != idemkit.StatusProcessing || rec.GID != out.GID {
		t.Fatalf("lost start left %s", rec.Status)
	}
	if _, _, err := b.lc.Begin(ctxb, "saga", "gid-retry", call("lost")); !errors.Is(err, idemkit.ErrInFlight) {
		t.Fatalf("retry of a lost start: %v, want ErrInFlight", err)
	}
	b.clock.Advance(2 * time.Second)
	m := &fakeManager{statuses: map[string]txstatus.Status{}}
	r := &hooks.Reconciler{Lifecycle: b.lc, Scopes: []string{"create-order"}, Manager: m}
	if n, err := r.RunOnce(ctxb, b.clock.Now(), 10); n != 1 || err != nil {
		t.Fatalf("reconciler: %d, %v", n, err)
	}
	if len(m.fenced) != 1 || m.fenced[0] != out.GID {
		t.Fatalf("fenced %q, want the lost start's gid %s", m.fenced, out.GID)
	}
	if rec := b.status(t, "lost"); rec.Status != idemkit.StatusFailed {
		t.Fatalf("after the reconciler: %s", rec.Status)
	}
}

// fakeManager answers a Reconciler from a map, and fences like DTM: an unknown gid becomes failed.
type fakeManager struct {
	mu       sync.Mutex
	statuses map[string]txstatus.Status
	fenced   []string
}

func (m *fakeManager) set(gid string, st txstatus.Status) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.statuses[gid] = st
}

func (m *fakeManager) Query(_ context.Context, gid string) (txstatus.Info, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return txstatus.Info{Status: m.statuses[gid]}, nil
}

func (m *fakeManager) Fence(_ context.Context, gid string) (txstatus.Info, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.fenced = append(m.fenced, gid)
	if m.statuses[gid] == txstatus.Unknown {
		m.statuses[gid] = txstatus.Failed
		return txstatus.Info{Status: txstatus.Failed, RollbackReason: txstatus.FenceReason}, nil
	}
	return txstatus.Info{Status: m.statuses[gid]}, nil
}

// TestPermanentFailureHasOneShape (issue 11, item 18): a BeforeTransaction hook that fails permanently
// makes the record REJECTED; the first call and every replay return the same shape, an error for which
// errors.As finds an *idemkit.RejectedError with the same message (the first call also wraps the
// hook's own error).
func TestPermanentFailureHasOneShape(t *testing.T) {
	b := setup(t)
	errBlocked := errors.New("customer blocked")
	b.lc.Before = hooks.BeforeTransactionFunc(func(context.Context, *hooks.Txn) error { return idemkit.Permanent(errBlocked) })
	dtm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("a rejected call reached DTM: %s", r.URL)
	}))
	defer dtm.Close()
	p := hooks.RunParams{TransType: "saga", Call: call("k"), Status: &txstatus.Client{Server: dtm.URL},
		Start: func(context.Context, string) error { t.Error("a rejected call started"); return nil }}
	_, first := b.lc.Run(ctxb, p)
	out, replay := b.lc.Run(ctxb, p)
	var r1, r2 *idemkit.RejectedError
	if !errors.As(first, &r1) || !errors.As(replay, &r2) || !out.Replayed {
		t.Fatalf("first %v (%T), replay %v (%T, replayed %v): want *idemkit.RejectedError both times", first, first, replay, replay, out.Replayed)
	}
	if r1.Message != r2.Message || first.Error() != replay.Error() || r1.Message != errBlocked.Error() {
		t.Fatalf("messages %q and %q, errors %q and %q", r1.Message, r2.Message, first, replay)
	}
	if !errors.Is(first, idemkit.ErrRejected) || !errors.Is(replay, idemkit.ErrRejected) || !errors.Is(first, errBlocked) {
		t.Fatalf("errors.Is: first %v, replay %v", first, replay)
	}
	if rec := b.status(t, "k"); rec.Status != idemkit.StatusRejected {
		t.Fatalf("record %s", rec.Status)
	}
}

// TestReconcilerFencesUnknownGIDsLoudly (issue 11, items 1b and 10): a pending record whose gid the
// manager never heard of is fenced before it is rolled back, logged at error level and reported to
// Observe; the rollback reason is the fence's.
func TestReconcilerFencesUnknownGIDsLoudly(t *testing.T) {
	b := setup(t)
	txn, _, err := b.lc.Begin(ctxb, "saga", "g-lost", call("k"))
	if err != nil {
		t.Fatal(err)
	}
	b.lc.Detach(ctxb, txn)
	b.clock.Advance(2 * time.Second)
	var logs strings.Builder
	var seen []hooks.ReconcileEvent
	m := &fakeManager{statuses: map[string]txstatus.Status{}}
	r := &hooks.Reconciler{Lifecycle: b.lc, Scopes: []string{"create-order"}, Manager: m,
		Logger:  slog.New(slog.NewTextHandler(&logs, nil)),
		Observe: func(_ context.Context, e *hooks.ReconcileEvent) { seen = append(seen, *e) }}
	if n, err := r.RunOnce(ctxb, b.clock.Now(), 10); n != 1 || err != nil {
		t.Fatalf("RunOnce = %d, %v", n, err)
	}
	if len(m.fenced) != 1 || len(seen) != 1 || !seen[0].Fenced || !seen[0].Settled || seen[0].Status != txstatus.Failed {
		t.Fatalf("fenced %q, events %+v", m.fenced, seen)
	}
	if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), "g-lost") {
		t.Fatalf("log: %s", logs.String())
	}
	if rec := b.status(t, "k"); rec.Status != idemkit.StatusFailed || !strings.Contains(rec.Error, txstatus.FenceReason) {
		t.Fatalf("record %s %q", rec.Status, rec.Error)
	}
}

// dtmAnswering is a DTM whose query API answers body for every gid; calls to anything else fail the test.
func dtmAnswering(t *testing.T, body string) *txstatus.Client {
	t.Helper()
	dtm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/query") {
			t.Errorf("unexpected call %s", r.URL)
		}
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(dtm.Close)
	return &txstatus.Client{Server: dtm.URL, PollInterval: time.Millisecond}
}

// TestRunRefusedStartNeverStarted: DTM refuses the start of a reused gid, which another transaction
// holds and which succeeded. Nothing of this call started: the record is rolled back, the commit hook
// does not run and the other transaction's status is not adopted.
func TestRunRefusedStartNeverStarted(t *testing.T) {
	b := setup(t)
	status := dtmAnswering(t, `{"branches":[{"op":"action"},{"op":"compensate"}],"transaction":{"status":"succeed","trans_type":"saga"}}`)
	out, err := b.lc.Run(ctxb, hooks.RunParams{TransType: "saga", Call: call("k"), Status: status, GID: "reused", Wait: time.Second,
		Result: []byte("mine"),
		Start: func(context.Context, string) error {
			return &txstatus.RefusedError{Op: "submit", GID: "reused", Message: "current status 'succeed', cannot sumbmit"}
		}})
	if err != nil || out.Status != txstatus.Failed || !errors.Is(out.Reason, hooks.ErrRolledBack) || out.Result != nil {
		t.Fatalf("refused start of a held gid: %+v, %v", out, err)
	}
	if rec := b.status(t, "k"); rec.Status != idemkit.StatusFailed || !strings.Contains(rec.Error, "never started") {
		t.Fatalf("record %s %q", rec.Status, rec.Error)
	}
	if got := b.j.list(); len(got) != 0 { // the gid is another transaction's: see TestHeldGIDRunsNoHook
		t.Fatalf("hooks ran: %v", got)
	}
}

// TestRunSucceedOfAnotherTransactionIsNotOurs: the saga's submit was accepted, but DTM reports the gid
// as the fence's transaction that "succeeded" with no branch (a submit that landed between a
// Reconciler's fence prepare and abort). No step ran: Run reports Failed and rolls the record back.
func TestRunSucceedOfAnotherTransactionIsNotOurs(t *testing.T) {
	for _, stored := range []string{"tcc", "saga"} { // a SQL store keeps the fence's type; boltdb and Redis the saga's
		t.Run(stored, func(t *testing.T) {
			b := setup(t)
			status := dtmAnswering(t, `{"branches":[],"transaction":{"status":"succeed","trans_type":"`+stored+`"}}`)
			out, err := b.lc.Run(ctxb, hooks.RunParams{TransType: "saga", Call: call("k"), Status: status, Wait: time.Second,
				Result: []byte("mine"), Start: func(context.Context, string) error { return nil }})
			if err != nil || out.Status != txstatus.Failed || !errors.Is(out.Reason, hooks.ErrRolledBack) || out.Result != nil {
				t.Fatalf("Run = %+v, %v; want Failed", out, err)
			}
			if rec := b.status(t, "k"); rec.Status != idemkit.StatusFailed || !strings.Contains(rec.Error, "never started") {
				t.Fatalf("record %s %q", rec.Status, rec.Error)
			}
			for _, c := range b.j.list() {
				if strings.HasPrefix(c, "commit") {
					t.Fatalf("hooks ran: %v", b.j.list())
				}
			}
		})
	}
	// A TCC that joined the fence and submitted is genuine, with or without branches.
	b := setup(t)
	status := dtmAnswering(t, `{"branches":[],"transaction":{"status":"succeed","trans_type":"tcc"}}`)
	out, err := b.lc.Run(ctxb, hooks.RunParams{TransType: "tcc", Call: call("k"), Status: status, Wait: time.Second,
		Result: []byte("mine"), Start: func(context.Context, string) error { return nil }})
	if err != nil || out.Status != txstatus.Succeed {
		t.Fatalf("TCC Run = %+v, %v", out, err)
	}
}

// infoManager answers a Reconciler with info for every gid.
type infoManager struct{ info txstatus.Info }

func (m infoManager) Query(context.Context, string) (txstatus.Info, error) { return m.info, nil }
func (m infoManager) Fence(context.Context, string) (txstatus.Info, error) { return m.info, nil }

// TestReconcilerRollsBackAStartThatRanNothing: the Reconciler finds DTM reporting the record's gid
// succeeded, but as the fence's empty transaction (the saga's late submit landed between the fence's
// prepare and abort): it rolls the record back instead of committing it. A saga with its steps, or a
// TCC, is committed.
func TestReconcilerRollsBackAStartThatRanNothing(t *testing.T) {
	for _, tc := range []struct {
		transType string
		info      txstatus.Info
		want      idemkit.Status
	}{
		{"saga", txstatus.Info{Status: txstatus.Succeed, TransType: "tcc"}, idemkit.StatusFailed},
		{"saga", txstatus.Info{Status: txstatus.Succeed, TransType: "saga"}, idemkit.StatusFailed},
		{"", txstatus.Info{Status: txstatus.Succeed, TransType: "saga"}, idemkit.StatusFailed},
		{"saga", txstatus.Info{Status: txstatus.Succeed, TransType: "saga", Branches: 4}, idemkit.StatusSucceeded},
		{"tcc", txstatus.Info{Status: txstatus.Succeed, TransType: "tcc"}, idemkit.StatusSucceeded},
		{"", txstatus.Info{Status: txstatus.Succeed, TransType: "tcc", Branches: 2}, idemkit.StatusSucceeded},
	} {
		b := setup(t)
		txn, _, err := b.lc.Begin(ctxb, "saga", "g", call("k"))
		if err != nil {
			t.Fatal(err)
		}
		b.lc.Detach(ctxb, txn)
		b.clock.Advance(2 * time.Second)
		var seen []hooks.ReconcileEvent
		r := &hooks.Reconciler{Lifecycle: b.lc, Scopes: []string{"create-order"}, Manager: infoManager{tc.info}, TransType: tc.transType,
			Observe: func(_ context.Context, e *hooks.ReconcileEvent) { seen = append(seen, *e) }}
		if n, err := r.RunOnce(ctxb, b.clock.Now(), 10); n != 1 || err != nil {
			t.Fatalf("%q %+v: RunOnce = %d, %v", tc.transType, tc.info, n, err)
		}
		if rec := b.status(t, "k"); rec.Status != tc.want {
			t.Errorf("%q %+v: record %s %q, want %s", tc.transType, tc.info, rec.Status, rec.Error, tc.want)
		}
		if tc.want == idemkit.StatusFailed && (len(seen) != 1 || seen[0].Status != txstatus.Failed) {
			t.Errorf("%q %+v: events %+v", tc.transType, tc.info, seen)
		}
	}
}

// TestRunPermanentStartErrorHasOneShape: a Start that fails with a permanent error (a TCC try's) after
// the transaction began: DTM rolls it back, the record is REJECTED, and the first call returns the
// shape every replay returns — an *idemkit.RejectedError with the stored message — beside the Outcome
// with Status Failed. A Reconciler that settles such a record from DTM's rollback reason (which the
// TCC initiator marks with hooks.PermanentReason) records it REJECTED with the same message.
func TestRunPermanentStartErrorHasOneShape(t *testing.T) {
	b := setup(t)
	errCheck := errors.New("post-try check refused")
	status := dtmAnswering(t, `{"branches":[],"transaction":{"status":"failed","trans_type":"tcc","rollback_reason":"x"}}`)
	p := hooks.RunParams{TransType: "tcc", Call: call("k"), Status: status, Wait: time.Second,
		Start: func(context.Context, string) error { return idemkit.Permanent(errCheck) }}
	out, first := b.lc.Run(ctxb, p)
	if out.Status != txstatus.Failed || !errors.Is(out.Reason, errCheck) {
		t.Fatalf("first call: %+v, %v", out, first)
	}
	replayed, replay := b.lc.Run(ctxb, p)
	var r1, r2 *idemkit.RejectedError
	if !errors.As(first, &r1) || !errors.As(replay, &r2) || !replayed.Replayed {
		t.Fatalf("first %v (%T), replay %v (%T): want *idemkit.RejectedError both times", first, first, replay, replay)
	}
	if r1.Message != r2.Message || first.Error() != replay.Error() || !errors.Is(first, errCheck) {
		t.Fatalf("first %q, replay %q", first, replay)
	}
	if rec := b.status(t, "k"); rec.Status != idemkit.StatusRejected {
		t.Fatalf("record %s", rec.Status)
	}

	// Settled by a Reconciler instead: the same record.
	txn, _, err := b.lc.Begin(ctxb, "tcc", "g2", call("k2"))
	if err != nil {
		t.Fatal(err)
	}
	b.lc.Detach(ctxb, txn)
	b.clock.Advance(2 * time.Second)
	r := &hooks.Reconciler{Lifecycle: b.lc, Scopes: []string{"create-order"}, TransType: "tcc", Manager: infoManager{txstatus.Info{
		Status: txstatus.Failed, TransType: "tcc", RollbackReason: hooks.PermanentReason + errCheck.Error()}}}
	if n, err := r.RunOnce(ctxb, b.clock.Now(), 10); n != 1 || err != nil {
		t.Fatalf("RunOnce = %d, %v", n, err)
	}
	if rec := b.status(t, "k2"); rec.Status != idemkit.StatusRejected || rec.Error != r1.Message {
		t.Fatalf("reconciled record %s %q, want REJECTED %q", rec.Status, rec.Error, r1.Message)
	}
}
