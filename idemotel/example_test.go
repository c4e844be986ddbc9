package idemotel_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/glebarez/sqlite"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/admin"
	"github.com/idemkit/idemkit/idemotel"
	"github.com/idemkit/idemkit/record"
	"github.com/idemkit/idemkit/sweep"
)

// Example_prometheus serves idemkit's metrics in Prometheus format: the OpenTelemetry Prometheus
// exporter on a registry of its own, the Observer on the Guard and on the sweeper's tasks, and the
// record table's PROCESSING claims read at every scrape.
func Example_prometheus() {
	ctx := context.Background()
	db, err := gorm.Open(sqlite.Open("file:example?mode=memory&cache=shared"), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		log.Fatal(err)
	}
	store, err := record.New(db, nil)
	if err != nil {
		log.Fatal(err)
	}
	if err := store.CreateTable(ctx); err != nil {
		log.Fatal(err)
	}
	adm, err := admin.New(db, nil) // same table and namespace as the Guard
	if err != nil {
		log.Fatal(err)
	}

	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		log.Fatal(err)
	}
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer provider.Shutdown(ctx)
	obs, err := idemotel.New(&idemotel.Options{MeterProvider: provider, Claims: adm.Claims})
	if err != nil {
		log.Fatal(err)
	}
	defer obs.Close() // unregisters the claims callback from the provider
	guard, err := idemkit.New(store, &idemkit.Options{Observer: obs})
	if err != nil {
		log.Fatal(err)
	}
	sweeper, err := sweep.New(nil, obs.Tasks(sweep.RecordTasks(store)...)...)
	if err != nil {
		log.Fatal(err)
	}
	defer sweeper.Close()
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))

	call := idemkit.Call{Scope: "POST /orders", Key: "order-1"}
	for range 2 {
		if _, err := guard.Do(ctx, call, func(context.Context) ([]byte, error) { return []byte("ok"), nil }); err != nil {
			log.Fatal(err)
		}
	}

	srv := httptest.NewServer(mux)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "idemkit_calls_total{") {
			fmt.Println(line[:strings.Index(line, ",otel_scope")], line[strings.LastIndex(line, " ")+1:])
		}
	}
	// Output:
	// idemkit_calls_total{idemkit_mode="execute",idemkit_outcome="executed",idemkit_scope="POST /orders",idemkit_status="SUCCEEDED" 1
	// idemkit_calls_total{idemkit_mode="execute",idemkit_outcome="replayed",idemkit_scope="POST /orders",idemkit_status="SUCCEEDED" 1
}
