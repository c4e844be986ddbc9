package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestStatsWithAnInstanceDown: stats reads the table and, with --metrics, each instance's counters.
// One instance down (crashed: often why the operator is looking) made the whole command fail with no
// statistics at all, the table's included. It prints them, the duplicate rate from the instances that
// answered, names the one that did not, and exits 1.
func TestStatsWithAnInstanceDown(t *testing.T) {
	f := setup(t, "postgres")
	f.populate(t)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("# TYPE idemkit_calls_total counter\n" +
			`idemkit_calls_total{idemkit_mode="execute",idemkit_outcome="executed",idemkit_scope="POST /orders",idemkit_status="SUCCEEDED"} 3` + "\n" +
			`idemkit_calls_total{idemkit_mode="execute",idemkit_outcome="replayed",idemkit_scope="POST /orders",idemkit_status="SUCCEEDED"} 1` + "\n"))
	}))
	t.Cleanup(up.Close)
	down := httptest.NewServer(http.NotFoundHandler())
	downURL := down.URL + "/metrics"
	down.Close()
	urls := up.URL + "/metrics," + downURL
	r := f.want(t, exitError, nil, []string{"stats", "--metrics", urls}, downURL)
	if !strings.Contains(r.stdout, scopeA) || !strings.Contains(r.stdout, "25.0% (1 of 4)") || !strings.Contains(r.stdout, "1 of 2") {
		t.Fatalf("stats with one instance down: %s\nwant the table's statistics and the rate of the instance that answered", r)
	}
	js := f.want(t, exitError, nil, []string{"stats", "--json", "--metrics", urls}, downURL)
	out := jsonOf[struct {
		Scopes []statsJSON `json:"scopes"`
		Errors []string    `json:"metrics_errors"`
	}](t, js)
	if len(out.Scopes) == 0 || len(out.Errors) != 1 || !strings.Contains(out.Errors[0], downURL) {
		t.Fatalf("stats --json with one instance down: %s", js)
	}
}
