package idemotel_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/idemotel"
	"github.com/idemkit/idemkit/idemtest"
	"github.com/idemkit/idemkit/memory"
	"github.com/idemkit/idemkit/sweep"
	"github.com/idemkit/idemkit/txstatus"
)

func TestSpansAndMetrics(t *testing.T) {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	obs, err := idemotel.New(&idemotel.Options{TracerProvider: tp, MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	g, err := idemkit.New(memory.NewStore(), &idemkit.Options{Observer: obs, Locker: memory.NewLocker(nil)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	call := idemkit.Call{Scope: "POST /orders", Key: "secret-key"}
	var spanInside bool
	fn := func(ctx context.Context) ([]byte, error) {
		spanInside = trace.SpanFromContext(ctx).SpanContext().IsValid()
		return []byte("v"), nil
	}
	for range 3 {
		if _, err := g.Do(ctx, call, fn); err != nil {
			t.Fatal(err)
		}
	}
	_, _ = g.Do(ctx, idemkit.Call{Scope: "POST /orders", Key: "k2"}, func(context.Context) ([]byte, error) { return nil, errors.New("x") })
	if !spanInside {
		t.Fatal("the guarded function did not run inside the call's span")
	}
	ended := spans.Ended()
	if len(ended) != 4 || ended[0].Name() != "idemkit.execute" {
		t.Fatalf("%d spans, first %q", len(ended), ended[0].Name())
	}
	for _, s := range ended {
		for _, a := range s.Attributes() {
			if a.Value.AsString() == "secret-key" {
				t.Fatal("a span carries the raw key")
			}
		}
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	byOutcome := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "idemkit.calls" {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				o, _ := dp.Attributes.Value("idemkit.outcome")
				byOutcome[o.AsString()] += dp.Value
			}
		}
	}
	if byOutcome["executed"] != 2 || byOutcome["replayed"] != 2 {
		t.Fatalf("calls by outcome %v, want 2 executed and 2 replayed", byOutcome)
	}
}

// collect returns the sum of each instrument's data points whose attributes include want, keyed by
// instrument name: counter and gauge values, histogram counts.
func collect(t *testing.T, reader *sdkmetric.ManualReader, want map[string]string) map[string]float64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	match := func(set attribute.Set) bool {
		for k, v := range want {
			got, ok := set.Value(attribute.Key(k))
			if !ok || got.Emit() != v {
				return false
			}
		}
		return true
	}
	out := map[string]float64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, dp := range d.DataPoints {
					if match(dp.Attributes) {
						out[m.Name] += float64(dp.Value)
					}
				}
			case metricdata.Gauge[int64]:
				for _, dp := range d.DataPoints {
					if match(dp.Attributes) {
						out[m.Name] += float64(dp.Value)
					}
				}
			case metricdata.Gauge[float64]:
				for _, dp := range d.DataPoints {
					if match(dp.Attributes) {
						out[m.Name] += dp.Value
					}
				}
			case metricdata.Histogram[float64]:
				for _, dp := range d.DataPoints {
					if match(dp.Attributes) {
						out[m.Name] += float64(dp.Count)
					}
				}
			}
		}
	}
	return out
}

// failingLocker fails every call, like an unreachable Redis.
type failingLocker struct{}

func (failingLocker) Acquire(context.Context, string, string, time.Duration) ([]byte, error) {
	return nil, errors.New("down")
}
func (failingLocker) Refresh(context.Context, string, string, time.Duration) error {
	return errors.New("down")
}
func (failingLocker) Release(context.Context, string, string, []byte, time.Duration) error {
	return errors.New("down")
}

// TestEveryInstrument: each kind of call moves exactly its instruments, labelled by mode, scope and
// outcome and never by key; sweeper tasks and the claims gauges report what they are given.
func TestEveryInstrument(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	claims := []idemotel.ClaimStats{{Scope: "POST /x", Processing: 3, Stuck: 2, Oldest: 90 * time.Second}, {Scope: "bad\x00scope", Processing: 1}}
	obs, err := idemotel.New(&idemotel.Options{MeterProvider: mp, Claims: func(context.Context) ([]idemotel.ClaimStats, error) { return claims, nil }})
	if err != nil {
		t.Fatal(err)
	}
	clock := idemtest.NewClock()
	store := memory.NewStore()
	newGuard := func(o idemkit.Options) *idemkit.Guard {
		o.Observer, o.Now, o.Lease = obs, clock.Now, time.Minute
		g, err := idemkit.New(store, &o)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	cached := newGuard(idemkit.Options{Locker: memory.NewLocker(nil)})
	plain := newGuard(idemkit.Options{})
	failOpen := newGuard(idemkit.Options{Locker: failingLocker{}, FailOpen: true})
	ctx := context.Background()
	do := func(g *idemkit.Guard, key, fp string) error {
		_, err := g.Do(ctx, idemkit.Call{Scope: "POST /x", Key: key, Fingerprint: fp}, func(context.Context) ([]byte, error) {
			clock.Advance(10 * time.Millisecond)
			return []byte("v"), nil
		})
		return err
	}
	_ = do(cached, "secret-1", "f")     // new key
	_ = do(cached, "secret-1", "f")     // replay, cache
	_ = do(plain, "secret-1", "f")      // replay, store (conflict)
	_ = do(cached, "secret-1", "other") // mismatch (from the cache)
	held, _, err := plain.Begin(ctx, idemkit.Call{Scope: "POST /x", Key: "secret-2"})
	if err != nil {
		t.Fatal(err)
	}
	_ = do(plain, "secret-2", "") // in flight (conflict)
	clock.Advance(2 * time.Minute)
	_ = do(plain, "secret-2", "") // takeover (conflict)
	if _, err := held.Finish(ctx, nil, nil); !errors.Is(err, idemkit.ErrFenced) {
		t.Fatalf("finish after takeover: %v", err)
	}
	_ = do(failOpen, "secret-3", "") // new key, fail-open
	_ = do(plain, "", "")            // invalid key
	for _, task := range obs.Tasks(
		sweep.Task{Name: "recover_stale", Run: func(context.Context, time.Time, int) (int, error) { return 4, nil }},
		sweep.Task{Name: "reconcile", Run: func(context.Context, time.Time, int) (int, error) { return 1, errors.New("dtm down") }},
	) {
		_, _ = task.Run(ctx, clock.Now(), 10)
	}

	x := map[string]string{idemotel.AttrScope: "POST /x", idemotel.AttrMode: "execute"}
	got := collect(t, reader, x)
	want := map[string]float64{
		"idemkit.calls":           9, // the held claim's call ends with its (fenced) finish
		"idemkit.new_keys":        3, // secret-1, secret-2 (held), secret-3
		"idemkit.replays":         2,
		"idemkit.store.conflicts": 3,
		"idemkit.takeovers":       1,
		"idemkit.fenced":          1,
		"idemkit.fail_open":       1,
		"idemkit.duration":        9,
		"idemkit.claim.duration":  4, // secret-1, secret-2 held, secret-2 takeover, secret-3
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s = %v, want %v", name, got[name], w)
		}
	}
	outcome := func(o string) float64 {
		return collect(t, reader, map[string]string{idemotel.AttrScope: "POST /x", idemotel.AttrOutcome: o})["idemkit.calls"]
	}
	gauges := collect(t, reader, map[string]string{idemotel.AttrScope: "POST /x"})
	for name, w := range map[string]float64{"idemkit.records.processing": 3, "idemkit.records.stuck": 2, "idemkit.records.oldest_processing": 90} {
		if gauges[name] != w {
			t.Errorf("%s = %v, want %v", name, gauges[name], w)
		}
	}
	for o, w := range map[string]float64{"executed": 4, "replayed": 2, "mismatch": 1, "in_flight": 1, "invalid": 1} {
		if g := outcome(o); g != w {
			t.Errorf("calls with outcome %s = %v, want %v", o, g, w)
		}
	}
	if g := collect(t, reader, map[string]string{idemotel.AttrSource: "cache"})["idemkit.replays"]; g != 1 {
		t.Errorf("replays from the cache = %v, want 1", g)
	}
	if g := collect(t, reader, map[string]string{idemotel.AttrTask: "recover_stale"})["idemkit.sweep.rows"]; g != 4 {
		t.Errorf("sweep rows of recover_stale = %v, want 4", g)
	}
	if g := collect(t, reader, map[string]string{idemotel.AttrTask: "reconcile"}); g["idemkit.sweep.rows"] != 1 || g["idemkit.sweep.errors"] != 1 {
		t.Errorf("reconcile: %v, want 1 row and 1 error", g)
	}
	if g := collect(t, reader, map[string]string{idemotel.AttrScope: idemotel.InvalidScope})["idemkit.records.processing"]; g != 1 {
		t.Errorf("a scope with a NUL is not reported as %s: %v", idemotel.InvalidScope, g)
	}
	var rm metricdata.ResourceMetrics
	_ = reader.Collect(ctx, &rm)
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if b, _ := json.Marshal(m.Data); strings.Contains(string(b), "secret") {
				t.Fatalf("%s carries a key", m.Name)
			}
		}
	}
}

// manager answers a reconciler from a map of gid → status; Fence turns an unknown gid into failed.
type manager map[string]txstatus.Status

func (m manager) Query(_ context.Context, gid string) (txstatus.Info, error) {
	return txstatus.Info{Status: m[gid]}, nil
}

func (m manager) Fence(_ context.Context, gid string) (txstatus.Info, error) {
	m[gid] = txstatus.Failed
	return txstatus.Info{Status: txstatus.Failed}, nil
}

// TestReconcilerMetrics: a reconciler observed by Reconciled counts settlements by outcome, fenced
// gids and failures, labelled with the scope as the reconciler names it (namespace removed).
func TestReconcilerMetrics(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	obs, err := idemotel.New(&idemotel.Options{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})
	if err != nil {
		t.Fatal(err)
	}
	clock := idemtest.NewClock()
	g, err := idemkit.New(memory.NewStore(), &idemkit.Options{Namespace: "shop", Now: clock.Now, Lease: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, gid := range []string{"g-ok", "g-lost", "g-broken"} {
		cl, _, err := g.Begin(ctx, idemkit.Call{Scope: "POST /orders", Key: gid, GID: gid})
		if err != nil {
			t.Fatal(err)
		}
		cl.Detach(ctx)
	}
	clock.Advance(time.Minute)
	failing := errors.New("hook down")
	lc := &hooks.Lifecycle{Guard: g, OnRollback: hooks.RollbackFunc(func(_ context.Context, t *hooks.Txn, _ error) error {
		if t.GID == "g-broken" {
			return failing
		}
		return nil
	})}
	r := &hooks.Reconciler{
		Lifecycle: lc, Scopes: []string{"POST /orders"},
		Manager: manager{"g-ok": txstatus.Succeed, "g-broken": txstatus.Failed}, // g-lost: unknown
		Observe: obs.Reconciled,
	}
	if n, err := r.RunOnce(ctx, clock.Now(), 10); n != 2 || !errors.Is(err, failing) {
		t.Fatalf("RunOnce = %d, %v; want 2 settled and the hook's error", n, err)
	}
	scope := map[string]string{idemotel.AttrScope: "POST /orders"}
	got := collect(t, reader, scope)
	for name, w := range map[string]float64{"idemkit.reconcile.settled": 2, "idemkit.reconcile.fenced": 1, "idemkit.reconcile.errors": 1} {
		if got[name] != w {
			t.Errorf("%s = %v, want %v", name, got[name], w)
		}
	}
	for st, w := range map[txstatus.Status]float64{txstatus.Succeed: 1, txstatus.Failed: 1} {
		if g := collect(t, reader, map[string]string{idemotel.AttrScope: "POST /orders", idemotel.AttrTxStatus: string(st)})["idemkit.reconcile.settled"]; g != w {
			t.Errorf("settled with outcome %s = %v, want %v", st, g, w)
		}
	}
}

// TestLongScopeLabel: a scope longer than idemkit.MaxStoredLen bytes is valid (the Guard stores it
// hashed). Its calls, its reconciled records and its claims share one label, the hashed stored form
// that idemctl and the claims gauges show; only a scope no Guard accepts is "_invalid".
func TestLongScopeLabel(t *testing.T) {
	long := "POST /" + strings.Repeat("x", 200)
	stored := idemkit.StoredForm(long)
	reader := sdkmetric.NewManualReader()
	obs, err := idemotel.New(&idemotel.Options{
		MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
		Claims: func(context.Context) ([]idemotel.ClaimStats, error) {
			return []idemotel.ClaimStats{{Scope: stored, Processing: 1}}, nil // as admin.Claims lists it
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	clock := idemtest.NewClock()
	g, err := idemkit.New(memory.NewStore(), &idemkit.Options{Observer: obs, Now: clock.Now, Lease: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := g.Do(ctx, idemkit.Call{Scope: long, Key: "k"}, func(context.Context) ([]byte, error) { return []byte("v"), nil }); err != nil {
		t.Fatal(err)
	}
	cl, _, err := g.Begin(ctx, idemkit.Call{Scope: long, Key: "g1", GID: "g1"})
	if err != nil {
		t.Fatal(err)
	}
	cl.Detach(ctx)
	clock.Advance(time.Minute)
	r := &hooks.Reconciler{
		Lifecycle: &hooks.Lifecycle{Guard: g}, Scopes: []string{long},
		Manager: manager{"g1": txstatus.Succeed}, Observe: obs.Reconciled,
	}
	if n, err := r.RunOnce(ctx, clock.Now(), 10); n != 1 || err != nil {
		t.Fatalf("RunOnce = %d, %v; want 1 settled", n, err)
	}
	_, _ = g.Do(ctx, idemkit.Call{Scope: strings.Repeat("y", 300), Key: "k"}, func(context.Context) ([]byte, error) { return nil, nil })

	got := collect(t, reader, map[string]string{idemotel.AttrScope: stored})
	for name, w := range map[string]float64{"idemkit.calls": 2, "idemkit.reconcile.settled": 1, "idemkit.records.processing": 1} {
		if got[name] != w {
			t.Errorf("%s labelled %s = %v, want %v", name, stored, got[name], w)
		}
	}
	invalid := collect(t, reader, map[string]string{idemotel.AttrScope: idemotel.InvalidScope})
	if invalid["idemkit.calls"] != 1 {
		t.Errorf("calls labelled %s = %v, want 1 (the 300-byte scope the Guard refused)", idemotel.InvalidScope, invalid["idemkit.calls"])
	}
}

// TestLongScopeLabelWithNamespace: with Options.Namespace the Guard stores a long scope as
// HashedForm(namespace+"/"+scope), and that is its label (found by a review: it was HashedForm(scope),
// a form nothing stores).
func TestLongScopeLabelWithNamespace(t *testing.T) {
	long := "POST /" + strings.Repeat("x", 200)
	reader := sdkmetric.NewManualReader()
	obs, err := idemotel.New(&idemotel.Options{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})
	if err != nil {
		t.Fatal(err)
	}
	g, err := idemkit.New(memory.NewStore(), &idemkit.Options{Namespace: "shop", Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := g.Do(ctx, idemkit.Call{Scope: long, Key: "k"}, func(context.Context) ([]byte, error) { return []byte("v"), nil }); err != nil {
		t.Fatal(err)
	}
	rec, err := g.Get(ctx, long, "k")
	if err != nil {
		t.Fatal(err)
	}
	got := collect(t, reader, map[string]string{idemotel.AttrScope: rec.Scope})
	if got["idemkit.calls"] != 1 {
		other := collect(t, reader, map[string]string{idemotel.AttrScope: idemkit.HashedForm(long)})
		t.Fatalf("calls labelled with the stored scope %s = %v, want 1; the call is labelled %s instead (%v calls), a form nothing stores",
			rec.Scope, got["idemkit.calls"], idemkit.HashedForm(long), other["idemkit.calls"])
	}
}

// TestLongScopeLabelMaxKeyLen: a Guard with Options.MaxKeyLen above 255 accepts a 300-byte scope
// (stored hashed): its calls are labelled with that hash, not "_invalid" (found by a review).
func TestLongScopeLabelMaxKeyLen(t *testing.T) {
	long := "POST /" + strings.Repeat("x", 300)
	reader := sdkmetric.NewManualReader()
	obs, err := idemotel.New(&idemotel.Options{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})
	if err != nil {
		t.Fatal(err)
	}
	g, err := idemkit.New(memory.NewStore(), &idemkit.Options{MaxKeyLen: 512, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := g.Do(ctx, idemkit.Call{Scope: long, Key: "k"}, func(context.Context) ([]byte, error) { return []byte("v"), nil }); err != nil {
		t.Fatalf("the Guard refused the scope: %v", err)
	}
	stored := idemkit.StoredForm(long)
	if got := collect(t, reader, map[string]string{idemotel.AttrScope: stored}); got["idemkit.calls"] != 1 {
		inv := collect(t, reader, map[string]string{idemotel.AttrScope: idemotel.InvalidScope})
		t.Fatalf("a call the Guard accepted and stored under %s: labelled with it %v times, %s %v times",
			stored, got["idemkit.calls"], idemotel.InvalidScope, inv["idemkit.calls"])
	}
}

// finishFailing is a Store whose record updates (an Execute-mode call's finish) fail.
type finishFailing struct{ idemkit.Store }

func (finishFailing) Update(context.Context, *idemkit.Record, idemkit.Version) error {
	return errors.New("connection refused")
}

// TestSpanErrorWhenOutcomeNotRecorded: a call whose function ran but whose outcome the Store could
// not write (the record stays PROCESSING, and the key runs again once its lease runs out) is a failure
// of the system: its span has an error status and the status attribute is the record's, not the
// SUCCEEDED that was never written. Before, the span looked like a clean success.
func TestSpanErrorWhenOutcomeNotRecorded(t *testing.T) {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	obs, err := idemotel.New(&idemotel.Options{TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	g, err := idemkit.New(finishFailing{memory.NewStore()}, &idemkit.Options{Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	_, err = g.Do(context.Background(), idemkit.Call{Scope: "s", Key: "k"}, func(context.Context) ([]byte, error) { return []byte("v"), nil })
	if !errors.Is(err, idemkit.ErrStoreUnavailable) {
		t.Fatalf("Do: %v", err)
	}
	ended := spans.Ended()
	if len(ended) != 1 {
		t.Fatalf("%d spans", len(ended))
	}
	var status string
	for _, a := range ended[0].Attributes() {
		if a.Key == idemotel.AttrStatus {
			status = a.Value.AsString()
		}
	}
	if ended[0].Status().Code != codes.Error || status == string(idemkit.StatusSucceeded) {
		t.Fatalf("span status %v, %s %q; want an error and not %s", ended[0].Status(), idemotel.AttrStatus, status, idemkit.StatusSucceeded)
	}
}

// TestScopeLabelsAreBounded: scopes made of request data (httpx.DefaultScope outside a router falls
// back to the request's path) added a series per resource to every metric. After Options.MaxScopes
// distinct scopes any new one is labelled OtherScope; the scopes met first keep their labels.
func TestScopeLabelsAreBounded(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	obs, err := idemotel.New(&idemotel.Options{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), MaxScopes: 2})
	if err != nil {
		t.Fatal(err)
	}
	g, err := idemkit.New(memory.NewStore(), &idemkit.Options{Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i, scope := range []string{"POST /orders/1", "POST /orders/2", "POST /orders/3", "POST /orders/4", "POST /orders/1"} {
		if _, err := g.Do(ctx, idemkit.Call{Scope: scope, Key: fmt.Sprint("k", i)}, func(context.Context) ([]byte, error) { return nil, nil }); err != nil {
			t.Fatal(err)
		}
	}
	for scope, want := range map[string]float64{"POST /orders/1": 2, "POST /orders/2": 1, "POST /orders/3": 0, "POST /orders/4": 0, idemotel.OtherScope: 2} {
		if got := collect(t, reader, map[string]string{idemotel.AttrScope: scope})["idemkit.calls"]; got != want {
			t.Errorf("calls labelled %q = %v, want %v", scope, got, want)
		}
	}
}

// TestClaimsOfOtherScopesAreSummed: the claims gauges of the scopes past MaxScopes share the label
// OtherScope; each observation under it replaced the one before (a gauge keeps the last value), so
// stuck records of one such scope were hidden by the next scope's zero.
func TestClaimsOfOtherScopesAreSummed(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	obs, err := idemotel.New(&idemotel.Options{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), MaxScopes: 1,
		Claims: func(context.Context) ([]idemotel.ClaimStats, error) {
			return []idemotel.ClaimStats{
				{Scope: "a", Processing: 1, Stuck: 1, Oldest: time.Minute},
				{Scope: "b", Processing: 4, Stuck: 3, Oldest: time.Hour},
				{Scope: "c", Processing: 2, Stuck: 0, Oldest: time.Second},
			}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	_ = obs
	got := collect(t, reader, map[string]string{idemotel.AttrScope: idemotel.OtherScope})
	want := map[string]float64{"idemkit.records.processing": 6, "idemkit.records.stuck": 3, "idemkit.records.oldest_processing": 3600}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s labelled %s = %v, want %v", name, idemotel.OtherScope, got[name], w)
		}
	}
}

// TestRefusedCallKeepsItsScopeLabel: a call refused for its key (or an unstorable fingerprint) has a
// valid scope: it is labelled as every other call of that scope is — the hashed stored form of a scope
// stored hashed — not "_invalid", and not by the raw scope where the namespace makes it stored hashed.
func TestRefusedCallKeepsItsScopeLabel(t *testing.T) {
	for _, c := range []struct {
		name, namespace, scope string
	}{
		{"long scope", "", "POST /" + strings.Repeat("x", 200)},
		{"hashed with its namespace", strings.Repeat("n", 40), "POST /" + strings.Repeat("x", 100)},
	} {
		t.Run(c.name, func(t *testing.T) {
			reader := sdkmetric.NewManualReader()
			obs, err := idemotel.New(&idemotel.Options{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})
			if err != nil {
				t.Fatal(err)
			}
			g, err := idemkit.New(memory.NewStore(), &idemkit.Options{Namespace: c.namespace, Observer: obs})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			run := func(context.Context) ([]byte, error) { return []byte("v"), nil }
			if _, err := g.Do(ctx, idemkit.Call{Scope: c.scope, Key: "k"}, run); err != nil {
				t.Fatal(err)
			}
			for _, call := range []idemkit.Call{
				{Scope: c.scope, Key: ""},
				{Scope: c.scope, Key: "bad\x00key"},
				{Scope: c.scope, Key: "k2", Fingerprint: strings.Repeat("f", 200)},
			} {
				if _, err := g.Do(ctx, call, run); err == nil {
					t.Fatalf("Do(%q) accepted", call.Key)
				}
			}
			rec, err := g.Get(ctx, c.scope, "k")
			if err != nil {
				t.Fatal(err)
			}
			if !idemkit.IsHashedForm(rec.Scope) {
				t.Fatalf("the scope is stored as %q, want a hashed form", rec.Scope)
			}
			got := collect(t, reader, map[string]string{idemotel.AttrScope: rec.Scope})
			if got["idemkit.calls"] != 4 {
				inv := collect(t, reader, map[string]string{idemotel.AttrScope: idemotel.InvalidScope})
				raw := collect(t, reader, map[string]string{idemotel.AttrScope: c.scope})
				t.Errorf("calls labelled with the stored scope = %v, want 4 (1 run, 3 refused); %s: %v, the raw scope: %v",
					got["idemkit.calls"], idemotel.InvalidScope, inv["idemkit.calls"], raw["idemkit.calls"])
			}
		})
	}
}

// TestClaimsReadIsBounded: the OpenTelemetry Prometheus exporter collects with context.TODO(), so
// the Claims read had no deadline: a database that stopped answering held every scrape's goroutine
// and a connection of the application's pool for good, one more every scrape. The read gets a
// deadline (Options.ClaimsTimeout); one that runs past it fails the collection of the gauges only.
func TestClaimsReadIsBounded(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	obs, err := idemotel.New(&idemotel.Options{
		MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
		Claims: func(ctx context.Context) ([]idemotel.ClaimStats, error) {
			if _, ok := ctx.Deadline(); !ok {
				return nil, errors.New("the claims read has no deadline")
			}
			<-ctx.Done() // a database that never answers
			return nil, ctx.Err()
		},
		ClaimsTimeout: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	g, err := idemkit.New(memory.NewStore(), &idemkit.Options{Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Do(context.Background(), idemkit.Call{Scope: "s", Key: "k"}, func(context.Context) ([]byte, error) { return nil, nil }); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	var rm metricdata.ResourceMetrics
	go func() { done <- reader.Collect(context.Background(), &rm) }() // as the exporter: no deadline
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Collect = %v, want the claims read's deadline", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Collect still waits for the claims read after 10s")
	}
	calls := 0
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == "idemkit.calls" {
				calls++
			}
		}
	}
	if calls != 1 {
		t.Errorf("the calls counter is missing from a collection whose claims read failed")
	}
}

// TestClaimsTimeoutDefault: without Options.ClaimsTimeout the read still gets a deadline, at most
// DefaultClaimsTimeout away.
func TestClaimsTimeoutDefault(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	var left time.Duration
	_, err := idemotel.New(&idemotel.Options{
		MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
		Claims: func(ctx context.Context) ([]idemotel.ClaimStats, error) {
			d, ok := ctx.Deadline()
			if !ok {
				return nil, errors.New("the claims read has no deadline")
			}
			left = time.Until(d)
			return nil, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	if left <= 0 || left > idemotel.DefaultClaimsTimeout {
		t.Errorf("the claims read's deadline is %s away, want within %s", left, idemotel.DefaultClaimsTimeout)
	}
}

// TestNegativeClaimsTimeoutIsRefused: a negative ClaimsTimeout was taken for the default, where the
// Guard's options and txstatus's PollInterval refuse a negative duration.
func TestNegativeClaimsTimeoutIsRefused(t *testing.T) {
	_, err := idemotel.New(&idemotel.Options{ClaimsTimeout: -time.Second})
	if err == nil || !strings.Contains(err.Error(), "ClaimsTimeout") {
		t.Fatalf("New with a negative ClaimsTimeout: %v, want an error naming it", err)
	}
}

// TestCloseUnregistersTheClaimsCallback: an Observer given Claims registers a callback with the
// MeterProvider that nothing unregistered: an Observer dropped (one per test, per tenant) went on being
// read at every collection, reporting the gauges of state nobody watched any more, one more callback
// per Observer created. Close unregisters it; the Observer's other instruments keep working.
func TestCloseUnregistersTheClaimsCallback(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	reads := map[string]int{}
	observer := func(scope string) *idemotel.Observer {
		obs, err := idemotel.New(&idemotel.Options{MeterProvider: mp, Claims: func(context.Context) ([]idemotel.ClaimStats, error) {
			reads[scope]++
			return []idemotel.ClaimStats{{Scope: scope, Processing: 1}}, nil
		}})
		if err != nil {
			t.Fatal(err)
		}
		return obs
	}
	dropped := observer("dropped")
	observer("kept") // another Observer on the provider, left open
	if got := collect(t, reader, map[string]string{idemotel.AttrScope: "dropped"}); got["idemkit.records.processing"] != 1 {
		t.Fatalf("before Close: %v, want the dropped Observer's gauge", got)
	}
	if err := dropped.Close(); err != nil {
		t.Fatal(err)
	}
	if err := dropped.Close(); err != nil { // idempotent
		t.Fatalf("second Close: %v", err)
	}
	before := reads["dropped"]
	if got := collect(t, reader, map[string]string{idemotel.AttrScope: "dropped"}); got["idemkit.records.processing"] != 0 {
		t.Errorf("after Close the dropped Observer's gauge is still reported: %v", got)
	}
	if reads["dropped"] != before {
		t.Errorf("after Close the dropped Observer's Claims was read %d more times", reads["dropped"]-before)
	}
	if got := collect(t, reader, map[string]string{idemotel.AttrScope: "kept"}); got["idemkit.records.processing"] != 1 {
		t.Errorf("the other Observer's gauge: %v, want it reported still", got)
	}
	// A closed Observer still counts the calls of a Guard that uses it: Close only ends the callback.
	g, err := idemkit.New(memory.NewStore(), &idemkit.Options{Observer: dropped})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Do(context.Background(), idemkit.Call{Scope: "late", Key: "k"}, func(context.Context) ([]byte, error) { return nil, nil }); err != nil {
		t.Fatal(err)
	}
	if got := collect(t, reader, map[string]string{idemotel.AttrScope: "late"}); got["idemkit.calls"] != 1 {
		t.Errorf("a call through the closed Observer: %v, want it counted", got)
	}
	// Without Claims, or without a MeterProvider, there is nothing to unregister.
	for _, o := range []*idemotel.Options{nil, {MeterProvider: mp}} {
		obs, err := idemotel.New(o)
		if err != nil {
			t.Fatal(err)
		}
		if err := obs.Close(); err != nil {
			t.Errorf("Close of an Observer without a callback: %v", err)
		}
	}
}
