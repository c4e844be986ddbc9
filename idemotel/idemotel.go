// Package idemotel reports idemkit's calls to OpenTelemetry: a span per guarded call and metrics for
// outcomes, new keys, replays, store conflicts, takeovers, fenced finishes, fail-open events, claim
// and call latency, sweeper and reconciler work (records settled, gids fenced), and the PROCESSING
// claims of a record table.
// Providers are passed in; nothing global is read or set.
//
//	obs, err := idemotel.New(&idemotel.Options{TracerProvider: tp, MeterProvider: mp})
//	guard, err := idemkit.New(store, &idemkit.Options{Observer: obs})
//	sweeper, err := sweep.New(opts, obs.Tasks(sweep.RecordTasks(store)...)...)
//	defer obs.Close() // unregisters the claims callback (Options.Claims) from the MeterProvider
//
// # Metrics
//
// Every metric is labelled by bounded values only: the mode, the scope ([idemkit.Call.Scope], a route
// pattern or a name the program chose — never the key), the outcome and the record's status, or the
// sweeper task's name. A scope stored hashed (longer than [idemkit.MaxStoredLen] bytes with its
// namespace) is reported in that hashed form, as idemctl and the claims gauges show it; the scope of a
// call refused as invalid that no Store could hold as it is (empty, control characters, too long) as
// "_invalid". Scopes are bounded too: after Options.MaxScopes distinct ones (DefaultMaxScopes, 256), any
// new scope is labelled "_other" — a scope made of request data would otherwise add series without end.
// Through the OpenTelemetry Prometheus exporter the names become idemkit_calls_total,
// idemkit_duration_seconds and so on, and the attribute idemkit.scope the label idemkit_scope; the
// README's "Operating idemkit" section has the table.
package idemotel

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/sweep"
)

// ScopeName is the instrumentation scope of the tracer and meter.
const ScopeName = "github.com/idemkit/idemkit"

// InvalidScope is the scope label of calls whose scope is not a valid stored scope.
const InvalidScope = "_invalid"

// OtherScope is the scope label of every scope an Observer meets after Options.MaxScopes others.
const OtherScope = "_other"

// DefaultMaxScopes is the default of Options.MaxScopes.
const DefaultMaxScopes = 256

// DefaultClaimsTimeout is the default of Options.ClaimsTimeout: below Prometheus's default scrape
// timeout (10s).
const DefaultClaimsTimeout = 5 * time.Second

// Attribute keys of the metrics and spans.
const (
	AttrMode    = "idemkit.mode"
	AttrScope   = "idemkit.scope"
	AttrOutcome = "idemkit.outcome"
	AttrStatus  = "idemkit.status"
	AttrSource  = "idemkit.source" // of a replay: "cache" or "store"
	AttrTask    = "idemkit.task"   // of a sweeper task: "delete_expired", "recover_stale", "reconcile"...
	// AttrTxStatus is a global transaction's outcome as the reconciler saw it: "succeed" or "failed".
	AttrTxStatus = "idemkit.tx_status"
)

// Options configure an [Observer]. The zero value reports nothing.
type Options struct {
	// TracerProvider creates the spans. Defaults to none (no spans).
	TracerProvider trace.TracerProvider
	// MeterProvider creates the instruments. Defaults to none (no metrics).
	MeterProvider metric.MeterProvider
	// Claims, when set (with a MeterProvider), is read at every metrics collection to report the
	// PROCESSING records of a record table by scope: the gauges idemkit.records.processing,
	// idemkit.records.stuck and idemkit.records.oldest_processing. admin.Admin.Claims implements it;
	// it costs one query per collection. Every instance given it reports the same table: a query over
	// instances takes one copy per application (max by job and scope), never their sum. An error it
	// returns is passed to the MeterProvider's error handling and the gauges are not reported for that
	// collection. Defaults to none.
	Claims func(ctx context.Context) ([]ClaimStats, error)
	// ClaimsTimeout bounds each read of Claims: its context ends then (an error for that collection).
	// The OpenTelemetry Prometheus exporter collects without a deadline, so without one a database
	// that stopped answering would hold a goroutine and a connection of the pool per scrape. Defaults
	// to DefaultClaimsTimeout (5s); negative is an error.
	ClaimsTimeout time.Duration
	// MaxScopes bounds the scope labels: the first MaxScopes distinct scopes the Observer reports
	// are labelled by themselves, any later one OtherScope. Scopes are meant to be few (route
	// patterns, names the program chose), but one made of request data — httpx.DefaultScope falls back
	// to the request's path outside a router, a Scope built from an id — would otherwise add series
	// without end. Defaults to DefaultMaxScopes; negative means no bound.
	MaxScopes int
}

// ClaimStats is the state of one scope's PROCESSING records at one moment.
type ClaimStats struct {
	// Scope is the scope as the application names it (namespace removed).
	Scope string
	// Processing counts the scope's PROCESSING records.
	Processing int64
	// Stuck counts those whose lease ran out: their holder died or stalled (without a GID, the
	// sweeper recovers them; with one, the reconciler settles them).
	Stuck int64
	// Oldest is the age of the oldest PROCESSING claim (since it was claimed or taken over).
	Oldest time.Duration
}

// Observer is an [idemkit.Observer] on OpenTelemetry. It is safe for concurrent use. One given
// Options.Claims holds a callback registered with the MeterProvider until [Observer.Close].
type Observer struct {
	tracer     trace.Tracer
	claims     metric.Registration // the claims gauges' callback; nil without Options.Claims
	scopes     scopeSet
	calls      metric.Int64Counter
	newKeys    metric.Int64Counter
	replays    metric.Int64Counter
	conflicts  metric.Int64Counter
	takeovers  metric.Int64Counter
	fenced     metric.Int64Counter
	failOpen   metric.Int64Counter
	duration   metric.Float64Histogram
	claimDur   metric.Float64Histogram
	sweepRows  metric.Int64Counter
	sweepErrs  metric.Int64Counter
	recSettled metric.Int64Counter
	recFenced  metric.Int64Counter
	recErrors  metric.Int64Counter
}

var _ idemkit.Observer = (*Observer)(nil)

// Latency histogram bucket boundaries, in seconds: 0.5 ms to 10 s.
var latencyBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// New returns an Observer using the providers in opts (nil for none). It returns an error when
// Options.ClaimsTimeout is negative or an instrument cannot be created.
func New(opts *Options) (*Observer, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.ClaimsTimeout < 0 {
		return nil, fmt.Errorf("idemotel: ClaimsTimeout must not be negative, got %s", o.ClaimsTimeout)
	}
	obs := &Observer{}
	obs.scopes.max = o.MaxScopes
	if o.MaxScopes == 0 {
		obs.scopes.max = DefaultMaxScopes
	}
	if o.TracerProvider != nil {
		obs.tracer = o.TracerProvider.Tracer(ScopeName)
	}
	if o.MeterProvider == nil {
		return obs, nil
	}
	m := o.MeterProvider.Meter(ScopeName)
	var errs []error
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithDescription(desc), metric.WithUnit(unit))
		errs = append(errs, err)
		return c
	}
	histogram := func(name, desc string) metric.Float64Histogram {
		h, err := m.Float64Histogram(name, metric.WithDescription(desc), metric.WithUnit("s"),
			metric.WithExplicitBucketBoundaries(latencyBuckets...))
		errs = append(errs, err)
		return h
	}
	obs.calls = counter("idemkit.calls", "{call}", "Guarded calls by mode, scope, outcome (executed, replayed, in_flight, mismatch, duplicate, detached, invalid, unavailable) and final status.")
	obs.newKeys = counter("idemkit.new_keys", "{call}", "Calls that claimed a key nobody held before (executed, not a takeover).")
	obs.replays = counter("idemkit.replays", "{call}", "Calls answered with a stored result, by source (cache or store).")
	obs.conflicts = counter("idemkit.store.conflicts", "{call}", "Claims whose insert met an existing record (a duplicate reached the store).")
	obs.takeovers = counter("idemkit.takeovers", "{call}", "Claims that took over a FAILED, expired or lease-expired record.")
	obs.fenced = counter("idemkit.fenced", "{call}", "Finishes refused because the record was no longer the claim's: taken over by a newer attempt, recovered by the sweeper, released or purged by an operator.")
	obs.failOpen = counter("idemkit.fail_open", "{call}", "Calls that went on without the Locker after it failed.")
	obs.duration = histogram("idemkit.duration", "Duration of guarded calls, by mode, scope and outcome.")
	obs.claimDur = histogram("idemkit.claim.duration", "Time to get a claim (lock and store), by mode and scope.")
	obs.sweepRows = counter("idemkit.sweep.rows", "{row}", "Rows a sweeper task handled, by task: delete_expired (deleted), recover_stale (recovered), reconcile (settled by the reconciler), barrier (deleted).")
	obs.sweepErrs = counter("idemkit.sweep.errors", "{run}", "Sweeper task runs that failed, by task.")
	obs.recSettled = counter("idemkit.reconcile.settled", "{record}", "Records a transaction reconciler settled, by scope and the transaction's outcome (succeed or failed).")
	obs.recFenced = counter("idemkit.reconcile.fenced", "{record}", "Pending records whose gid the transaction manager did not know: the reconciler fenced the gid. Alert when it grows: an initiator died before the manager heard of its transaction, or the manager lost one it had accepted.")
	obs.recErrors = counter("idemkit.reconcile.errors", "{record}", "Pending records a transaction reconciler could not settle in a pass (manager unreachable, a failing hook, the store), by scope.")
	if o.Claims != nil {
		errs = append(errs, obs.registerClaims(m, o.Claims, cmp.Or(o.ClaimsTimeout, DefaultClaimsTimeout)))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, errors.Join(fmt.Errorf("idemotel: creating instruments: %w", err), obs.Close())
	}
	return obs, nil
}

// Close unregisters the callback that reads Options.Claims at every metrics collection: the
// MeterProvider holds it, and with it the Observer and what Claims reads, until then, whether or not
// the Observer is still used — close an Observer that is dropped before its MeterProvider shuts down
// (one per test, per tenant). After Close the claims gauges are no longer reported by this Observer (a
// collection already running may still read Claims once); its other instruments and its spans keep
// working for a Guard that still uses it. Close returns the MeterProvider's error, if any; calling it
// again, or on an Observer without Claims, does nothing. It is safe for concurrent use.
func (o *Observer) Close() error {
	if o.claims == nil {
		return nil
	}
	if err := o.claims.Unregister(); err != nil { // idempotent, by the metric API's contract
		return fmt.Errorf("idemotel: unregistering the claims callback: %w", err)
	}
	return nil
}

// registerClaims creates the gauges of PROCESSING records and their callback, which reads them within
// timeout.
func (o *Observer) registerClaims(m metric.Meter, read func(context.Context) ([]ClaimStats, error), timeout time.Duration) error {
	processing, err1 := m.Int64ObservableGauge("idemkit.records.processing", metric.WithUnit("{record}"),
		metric.WithDescription("PROCESSING records by scope."))
	stuck, err2 := m.Int64ObservableGauge("idemkit.records.stuck", metric.WithUnit("{record}"),
		metric.WithDescription("PROCESSING records whose lease ran out, by scope: the holder died or stalled."))
	oldest, err3 := m.Float64ObservableGauge("idemkit.records.oldest_processing", metric.WithUnit("s"),
		metric.WithDescription("Age of the oldest PROCESSING claim, by scope."))
	if err := errors.Join(err1, err2, err3); err != nil {
		return err
	}
	reg, err := m.RegisterCallback(func(ctx context.Context, ob metric.Observer) error {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		stats, err := read(ctx)
		if err != nil {
			return fmt.Errorf("idemotel: reading claims: %w", err)
		}
		// Several scopes may share a label (OtherScope, InvalidScope): a gauge keeps only the last
		// value observed under one, so theirs are summed (the oldest is the oldest of them).
		byLabel := make(map[string]*ClaimStats, len(stats))
		var labels []string
		for _, s := range stats {
			l := o.scopes.label(storedLabel(s.Scope))
			if t, ok := byLabel[l]; ok {
				t.Processing += s.Processing
				t.Stuck += s.Stuck
				t.Oldest = max(t.Oldest, s.Oldest)
				continue
			}
			byLabel[l] = &s
			labels = append(labels, l)
		}
		for _, l := range labels {
			s := byLabel[l]
			attrs := metric.WithAttributes(attribute.String(AttrScope, l))
			ob.ObserveInt64(processing, s.Processing, attrs)
			ob.ObserveInt64(stuck, s.Stuck, attrs)
			ob.ObserveFloat64(oldest, s.Oldest.Seconds(), attrs)
		}
		return nil
	}, processing, stuck, oldest)
	o.claims = reg
	return err
}

// storedLabel is the label of a scope as a Store holds it (the claims gauges read them from the
// table): a value no Store holds becomes InvalidScope.
func storedLabel(stored string) string {
	if idemkit.ValidateKey(stored, idemkit.MaxStoredLen) != nil {
		return InvalidScope
	}
	return stored
}

// scopeLabel is the label of a call's scope given with its stored form ("" when the call's scope was
// refused as invalid): a scope stored hashed (longer than idemkit.MaxStoredLen bytes with its
// namespace) is labelled by that hash, as idemctl and the claims gauges show it, so a scope has one
// label in every metric; any other by itself. A refused call's scope that no Store could hold as it
// is (empty, control characters, too long) becomes InvalidScope.
func scopeLabel(scope, stored string) string {
	switch {
	case idemkit.IsHashedForm(stored):
		return stored
	case stored == "" && idemkit.ValidateKey(scope, idemkit.MaxStoredLen) != nil:
		return InvalidScope
	}
	return scope
}

// scopeSet bounds the scope labels of an Observer (Options.MaxScopes).
type scopeSet struct {
	max  int // negative: no bound
	mu   sync.RWMutex
	seen map[string]struct{}
}

// label returns scope's label: scope itself when it is one of the first max scopes met, or InvalidScope;
// OtherScope otherwise.
func (s *scopeSet) label(scope string) string {
	if s.max < 0 || scope == InvalidScope {
		return scope
	}
	s.mu.RLock()
	_, ok := s.seen[scope]
	s.mu.RUnlock()
	if ok {
		return scope
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.seen[scope]; ok {
		return scope
	}
	if len(s.seen) >= s.max {
		return OtherScope
	}
	if s.seen == nil {
		s.seen = make(map[string]struct{})
	}
	s.seen[scope] = struct{}{}
	return scope
}

// Start implements [idemkit.Observer].
func (o *Observer) Start(ctx context.Context, mode idemkit.Mode, scope string) (context.Context, func(*idemkit.Event)) {
	var span trace.Span
	if o.tracer != nil {
		ctx, span = o.tracer.Start(ctx, "idemkit."+mode.String(), trace.WithAttributes(
			attribute.String(AttrMode, mode.String()),
			attribute.String(AttrScope, scope),
		))
	}
	return ctx, func(ev *idemkit.Event) {
		if span != nil {
			span.SetAttributes(
				attribute.String("idemkit.key", ev.Key),
				attribute.String(AttrOutcome, ev.Outcome.String()),
				attribute.String(AttrStatus, string(ev.Status)),
				attribute.Int64("idemkit.fence", ev.Fence),
				attribute.Bool("idemkit.cached", ev.Cached),
				attribute.Bool("idemkit.takeover", ev.Takeover),
				attribute.Bool("idemkit.fenced", ev.Fenced),
				attribute.Bool("idemkit.fail_open", ev.FailOpen),
			)
			if ev.Err != nil && systemFailure(ev) {
				span.RecordError(ev.Err)
				span.SetStatus(codes.Error, ev.Err.Error())
			}
			span.End()
		}
		if o.calls != nil {
			o.record(ctx, ev)
		}
	}
}

// record adds one finished call to the instruments.
func (o *Observer) record(ctx context.Context, ev *idemkit.Event) {
	mode := attribute.String(AttrMode, ev.Mode.String())
	scope := attribute.String(AttrScope, o.scopes.label(scopeLabel(ev.Scope, ev.StoredScope)))
	outcome := attribute.String(AttrOutcome, ev.Outcome.String())
	base := metric.WithAttributes(mode, scope)
	o.calls.Add(ctx, 1, metric.WithAttributes(mode, scope, outcome, attribute.String(AttrStatus, string(ev.Status))))
	switch ev.Outcome {
	case idemkit.OutcomeExecuted, idemkit.OutcomeDetached: // the call got a claim
		if !ev.Takeover {
			o.newKeys.Add(ctx, 1, base)
		}
		o.claimDur.Record(ctx, ev.ClaimDuration.Seconds(), base)
	case idemkit.OutcomeReplayed:
		source := "store"
		if ev.Cached {
			source = "cache"
		}
		o.replays.Add(ctx, 1, metric.WithAttributes(mode, scope, attribute.String(AttrSource, source)))
	}
	if ev.Conflict {
		o.conflicts.Add(ctx, 1, base)
	}
	if ev.Takeover {
		o.takeovers.Add(ctx, 1, base)
	}
	if ev.Fenced {
		o.fenced.Add(ctx, 1, base)
	}
	if ev.FailOpen {
		o.failOpen.Add(ctx, 1, base)
	}
	o.duration.Record(ctx, ev.Duration.Seconds(), metric.WithAttributes(mode, scope, outcome))
}

// Tasks returns tasks wrapped by [Observer.Task].
func (o *Observer) Tasks(tasks ...sweep.Task) []sweep.Task {
	out := make([]sweep.Task, len(tasks))
	for i, t := range tasks {
		out[i] = o.Task(t)
	}
	return out
}

// Task returns t reporting its work: the rows each run returns are added to idemkit.sweep.rows and
// a failing run to idemkit.sweep.errors, labelled with t.Name. For the reconciler's task
// (hooks.Reconciler.Task, named "reconcile") the rows are the records it settled. Without a
// MeterProvider t is returned as is.
func (o *Observer) Task(t sweep.Task) sweep.Task {
	if o.sweepRows == nil || t.Run == nil {
		return t
	}
	run := t.Run
	attrs := metric.WithAttributes(attribute.String(AttrTask, t.Name))
	t.Run = func(ctx context.Context, now time.Time, limit int) (int, error) {
		n, err := run(ctx, now, limit)
		if n > 0 {
			o.sweepRows.Add(ctx, int64(n), attrs)
		}
		if err != nil {
			o.sweepErrs.Add(ctx, 1, attrs)
		}
		return n, err
	}
	return t
}

// Reconciled counts what a transaction reconciler did with one record: pass it as
// hooks.Reconciler.Observe and dtmmsg.Reconciler.Observe (or call it from yours). Settled records add to idemkit.reconcile.settled
// (labelled with the transaction's outcome), fenced gids to idemkit.reconcile.fenced, failures to
// idemkit.reconcile.errors, each labelled with the event's scope. Without a MeterProvider it does
// nothing.
func (o *Observer) Reconciled(ctx context.Context, ev *hooks.ReconcileEvent) {
	if o.recSettled == nil {
		return
	}
	scope := attribute.String(AttrScope, o.scopes.label(scopeLabel(ev.Scope, ev.Record.Scope)))
	if ev.Settled {
		o.recSettled.Add(ctx, 1, metric.WithAttributes(scope, attribute.String(AttrTxStatus, string(ev.Status))))
	}
	if ev.Fenced {
		o.recFenced.Add(ctx, 1, metric.WithAttributes(scope))
	}
	if ev.Err != nil {
		o.recErrors.Add(ctx, 1, metric.WithAttributes(scope))
	}
}

// systemFailure reports whether an event's error is a failure of the system rather than an expected
// answer (replays, in-flight, mismatches and business errors are answers): the Store or Locker
// unavailable before anything ran, a fenced finish, or an outcome the Store failed to write after the
// function ran.
func systemFailure(ev *idemkit.Event) bool {
	return ev.Outcome == idemkit.OutcomeUnavailable || ev.Fenced || errors.Is(ev.Err, idemkit.ErrStoreUnavailable)
}
