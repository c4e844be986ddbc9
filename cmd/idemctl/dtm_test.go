package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/dtm-labs/client/dtmcli"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/idemotel"
	"github.com/idemkit/idemkit/internal/dtmserver"
	"github.com/idemkit/idemkit/txstatus"
)

// TestDTM: idemctl dtm GID beside a real DTM server, on every database: a transaction DTM finished
// whose record is still PROCESSING, a gid DTM never saw with a record, and a gid nobody knows.
func TestDTM(t *testing.T) {
	srv := dtmserver.StartT(t)
	branch := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"dtm_result":"SUCCESS"}`))
	}))
	t.Cleanup(branch.Close)
	ctx := context.Background()
	gid := dtmcli.MustGenGid(srv.URL())
	if err := dtmcli.NewSaga(srv.URL(), gid).Add(branch.URL+"/action", branch.URL+"/compensate", map[string]any{}).Submit(); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if st, err := (&txstatus.Client{Server: srv.URL(), PollInterval: 50 * time.Millisecond}).Wait(wctx, gid); err != nil || st != txstatus.Succeed {
		t.Fatalf("saga %s: %s %v", gid, st, err)
	}

	forEachDialect(t, func(t *testing.T, f *fixture, s *states) {
		f.env["IDEMCTL_DTM"] = srv.URL()
		// The initiator died after DTM finished: its claim is still PROCESSING, its lease run out.
		cl, _, err := f.guard.Begin(ctx, idemkit.Call{Scope: scopeB, Key: "order-9", GID: gid})
		if err != nil {
			t.Fatal(err)
		}
		cl.Detach(ctx)
		f.clock.Advance(2 * testLease)
		before := f.snapshot(t)

		type dtmJSON struct {
			GID     string       `json:"gid"`
			Status  string       `json:"dtm_status"`
			Records []recordJSON `json:"records"`
			Reading string       `json:"reading"`
		}
		got := jsonOf[dtmJSON](t, f.want(t, exitOK, nil, []string{"dtm", "--json", gid}))
		if got.Status != "succeed" || len(got.Records) != 1 || got.Records[0].Key != "order-9" || got.Records[0].Status != "PROCESSING" ||
			!strings.Contains(got.Reading, "reconciler") {
			t.Fatalf("dtm %s: %+v", gid, got)
		}
		f.want(t, exitOK, nil, []string{"dtm", gid}, "DTM status: succeed", "order-9", "DTM says succeed but 1 record(s) are still PROCESSING")

		// The fixture's gid claim: DTM never saw that transaction.
		got = jsonOf[dtmJSON](t, f.want(t, exitOK, nil, []string{"dtm", "--json", s.gid}))
		if got.Status != "unknown" || len(got.Records) != 1 || got.Records[0].Key != s.gidClaim || !strings.Contains(got.Reading, "never submitted") {
			t.Fatalf("dtm %s: %+v", s.gid, got)
		}
		f.want(t, exitNotFound, nil, []string{"dtm", "no-such-gid"}, "DTM does not know", "no record carries it")
		if after := f.snapshot(t); after != before {
			t.Fatal("idemctl dtm changed something")
		}
	})
}

// TestStatsDuplicateRate: stats --metrics reads the duplicate rate of each scope from the
// application's /metrics (idemotel through the OpenTelemetry Prometheus exporter), summed over the
// instances given.
func TestStatsDuplicateRate(t *testing.T) {
	forEachDialect(t, func(t *testing.T, f *fixture, s *states) {
		ctx := context.Background()
		var urls []string
		for range 2 { // two instances of the application
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
			run := func(key, fp string) {
				_, _ = g.Do(ctx, idemkit.Call{Scope: scopeB, Key: key, Fingerprint: fp}, func(context.Context) ([]byte, error) { return []byte("v"), nil })
			}
			// Per instance: 2 keys run (2), then 3 replays and 1 mismatch (4 duplicates).
			key := "dup-" + t.Name() + "-" + string(rune('a'+len(urls)))
			run(key+"1", "f")
			run(key+"2", "f")
			run(key+"1", "f")
			run(key+"1", "f")
			run(key+"2", "f")
			run(key+"2", "other")
			srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
			t.Cleanup(srv.Close)
			urls = append(urls, srv.URL+"/metrics")
		}
		type statsOut struct {
			Scopes []statsJSON `json:"scopes"`
		}
		out := jsonOf[statsOut](t, f.want(t, exitOK, nil, []string{"stats", "--json", "--metrics", strings.Join(urls, ",")}))
		var b *statsJSON
		for i := range out.Scopes {
			if out.Scopes[i].Scope == scopeB {
				b = &out.Scopes[i]
			}
		}
		if b == nil || b.Calls == nil || b.Calls.Duplicates != 8 || b.Calls.Runs != 4 || b.DuplicateRate == nil || *b.DuplicateRate < 0.666 || *b.DuplicateRate > 0.667 {
			t.Fatalf("stats of %s: %+v", scopeB, b)
		}
		if a := out.Scopes[0]; a.Scope != scopeA || a.DuplicateRate != nil {
			t.Fatalf("a scope without calls has a duplicate rate: %+v", a)
		}
		f.want(t, exitOK, nil, []string{"stats", "--metrics", urls[0]}, "66.7% (4 of 6)", "idemkit_calls_total since")
	})
}
