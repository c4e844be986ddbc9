// Package idemotel reports idemkit's calls to OpenTelemetry: a span per guarded call and metrics for
// outcomes, store conflicts, takeovers, fenced finishes, fail-open events and latency. Providers are
// passed in; nothing global is read or set.
//
//	obs, err := idemotel.New(&idemotel.Options{TracerProvider: tp, MeterProvider: mp})
//	guard, err := idemkit.New(store, &idemkit.Options{Observer: obs})
package idemotel

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idemkit"
)

// ScopeName is the instrumentation scope of the tracer and meter.
const ScopeName = "github.com/idemkit/idemkit"

// Options configure an [Observer]. The zero value reports nothing.
type Options struct {
	// TracerProvider creates the spans. Defaults to none (no spans).
	TracerProvider trace.TracerProvider
	// MeterProvider creates the instruments. Defaults to none (no metrics).
	MeterProvider metric.MeterProvider
}

// Observer is an [idemkit.Observer] on OpenTelemetry. It is safe for concurrent use.
type Observer struct {
	tracer    trace.Tracer
	calls     metric.Int64Counter
	conflicts metric.Int64Counter
	takeovers metric.Int64Counter
	fenced    metric.Int64Counter
	failOpen  metric.Int64Counter
	duration  metric.Float64Histogram
}

var _ idemkit.Observer = (*Observer)(nil)

// New returns an Observer using the providers in opts (nil for none). It returns an error when an
// instrument cannot be created.
func New(opts *Options) (*Observer, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	obs := &Observer{}
	if o.TracerProvider != nil {
		obs.tracer = o.TracerProvider.Tracer(ScopeName)
	}
	if o.MeterProvider == nil {
		return obs, nil
	}
	m := o.MeterProvider.Meter(ScopeName)
	var errs []error
	counter := func(name, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithDescription(desc), metric.WithUnit("{call}"))
		errs = append(errs, err)
		return c
	}
	obs.calls = counter("idemkit.calls", "Guarded calls by mode, scope, outcome (executed, replayed, in_flight, mismatch, duplicate, detached, invalid, unavailable) and final status.")
	obs.conflicts = counter("idemkit.store.conflicts", "Claims whose insert met an existing record.")
	obs.takeovers = counter("idemkit.takeovers", "Claims that took over a FAILED, expired or lease-expired record.")
	obs.fenced = counter("idemkit.fenced", "Finishes refused because a newer attempt took the record over.")
	obs.failOpen = counter("idemkit.fail_open", "Calls that went on without the Locker after it failed.")
	h, err := m.Float64Histogram("idemkit.duration", metric.WithDescription("Duration of guarded calls."), metric.WithUnit("s"))
	obs.duration = h
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("idemotel: creating instruments: %w", err)
	}
	return obs, nil
}

// Start implements [idemkit.Observer].
func (o *Observer) Start(ctx context.Context, mode idemkit.Mode, scope string) (context.Context, func(*idemkit.Event)) {
	var span trace.Span
	if o.tracer != nil {
		ctx, span = o.tracer.Start(ctx, "idemkit."+mode.String(), trace.WithAttributes(
			attribute.String("idemkit.mode", mode.String()),
			attribute.String("idemkit.scope", scope),
		))
	}
	return ctx, func(ev *idemkit.Event) {
		if span != nil {
			span.SetAttributes(
				attribute.String("idemkit.key", ev.Key),
				attribute.String("idemkit.outcome", ev.Outcome.String()),
				attribute.String("idemkit.status", string(ev.Status)),
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
		if o.calls == nil {
			return
		}
		base := metric.WithAttributes(attribute.String("idemkit.mode", ev.Mode.String()), attribute.String("idemkit.scope", ev.Scope))
		o.calls.Add(ctx, 1, metric.WithAttributes(
			attribute.String("idemkit.mode", ev.Mode.String()),
			attribute.String("idemkit.scope", ev.Scope),
			attribute.String("idemkit.outcome", ev.Outcome.String()),
			attribute.String("idemkit.status", string(ev.Status)),
		))
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
		o.duration.Record(ctx, ev.Duration.Seconds(), metric.WithAttributes(
			attribute.String("idemkit.mode", ev.Mode.String()),
			attribute.String("idemkit.outcome", ev.Outcome.String()),
		))
	}
}

// systemFailure reports whether an event's error is a failure of the system rather than an expected
// answer (replays, in-flight, mismatches and business errors are answers).
func systemFailure(ev *idemkit.Event) bool {
	return ev.Outcome == idemkit.OutcomeUnavailable || ev.Fenced
}
