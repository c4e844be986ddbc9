package idemotel_test

import (
	"context"
	"errors"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/idemotel"
	"github.com/idemkit/idemkit/memory"
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
