package main

import (
	"context"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/idemotel"
)

// TestStatsOfAScopeOnlyTheMetricsKnow: stats --scope S --metrics URL of a scope the application's
// counters know but the table has no record of — every record of it expired and swept, or purged,
// while the processes that counted its calls still run — answers with its duplicate rate, as stats
// --metrics without --scope lists such a scope. It exited 3 ("unknown scope") before reading the
// metrics. A scope neither knows is still unknown (exit 3).
func TestStatsOfAScopeOnlyTheMetricsKnow(t *testing.T) {
	f := setup(t, "sqlite")
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	t.Cleanup(func() { _ = mp.Shutdown(ctx) })
	obs, err := idemotel.New(&idemotel.Options{MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	g, err := idemkit.New(f.store, &idemkit.Options{Namespace: testNS, Observer: obs, Now: f.clock.Now, Lease: testLease, TTL: testTTL})
	if err != nil {
		t.Fatal(err)
	}
	const gone = "POST /gone"
	for _, key := range []string{"k1", "k1", "k1", "k2"} { // 2 runs, 2 replays
		if _, err := g.Do(ctx, idemkit.Call{Scope: gone, Key: key}, func(context.Context) ([]byte, error) { return []byte("v"), nil }); err != nil {
			t.Fatal(err)
		}
	}
	// Its records are gone (swept after their TTL, or purged); the counters stay.
	if err := f.db.Exec("DELETE FROM "+f.table+" WHERE scope = ?", testNS+"/"+gone).Error; err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(srv.Close)
	metrics := srv.URL + "/metrics"

	f.want(t, exitOK, nil, []string{"stats", "--scope", gone, "--metrics", metrics}, gone, "50.0% (2 of 4)")
	type statsOut struct {
		Scopes []statsJSON `json:"scopes"`
	}
	out := jsonOf[statsOut](t, f.want(t, exitOK, nil, []string{"stats", "--json", "--scope", gone, "--metrics", metrics}))
	if len(out.Scopes) != 1 || out.Scopes[0].Scope != gone || out.Scopes[0].Total != 0 || out.Scopes[0].DuplicateRate == nil || *out.Scopes[0].DuplicateRate != 0.5 {
		t.Fatalf("stats --json --scope %q: %+v", gone, out.Scopes)
	}
	f.want(t, exitNotFound, nil, []string{"stats", "--scope", "POST /never", "--metrics", metrics}, "unknown scope")
	f.want(t, exitNotFound, nil, []string{"stats", "--scope", gone}, "unknown scope") // without the metrics, nothing knows it
}
