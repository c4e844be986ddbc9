package main

import (
	"context"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/idemkit/idemkit/idemotel"
)

// metrics exposes idemkit's OpenTelemetry instruments in Prometheus format (GET /metrics): the
// Guards' calls, the sweeper's and reconciler's work, and the record table's PROCESSING claims, on a
// Prometheus registry of its own (nothing global).
type metrics struct {
	provider *sdkmetric.MeterProvider
	observer *idemotel.Observer
	handler  http.Handler
}

// newMetrics builds the exporter, the meter provider and the Observer; claims reports the record
// table's PROCESSING claims at every scrape (admin.Admin.Claims).
func newMetrics(claims func(context.Context) ([]idemotel.ClaimStats, error)) (*metrics, error) {
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	obs, err := idemotel.New(&idemotel.Options{MeterProvider: mp, Claims: claims})
	if err != nil {
		_ = mp.Shutdown(context.Background())
		return nil, err
	}
	return &metrics{provider: mp, observer: obs, handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{})}, nil
}

// close stops the meter provider.
func (m *metrics) close(ctx context.Context) error { return m.provider.Shutdown(ctx) }
