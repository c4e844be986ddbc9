package httpx

import (
	"log/slog"
	"net/http"
	"strings"
	"testing"
)

// TestUnstorableResponseLogged: a response within MaxResponseBytes that the record store cannot
// hold (over MariaDB's MEDIUMBLOB, 16 MiB) is recorded without it — REJECTED, never run again, its
// duplicates answered 409 rejected — but the middleware logged "outcome not recorded; a retry after
// the lease may run again", sending an operator after a double run that cannot happen. It logs what
// was recorded now (found by a defect hunt).
func TestUnstorableResponseLogged(t *testing.T) {
	logs := &logSink{}
	bd := setup(t, realBackend, &Options{MaxResponseBytes: 32 << 20, Logger: slog.New(logs)}, nil)
	body := strings.Repeat("z", 17<<20)
	h := bd.mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		bd.calls.Add(1)
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte(body))
	}))
	srv, client := newServer(t, h)
	if status, _, got := send(t, client, "POST", srv.URL+"/reports", "k-huge", ""); status != http.StatusOK || len(got) != len(body) {
		t.Fatalf("first: %d, %d bytes", status, len(got))
	}
	status, _, got := send(t, client, "POST", srv.URL+"/reports", "k-huge", "")
	if status != http.StatusConflict || bd.calls.Load() != 1 {
		t.Fatalf("duplicate: %d %s, handler ran %d times; want 409 and one run", status, got, bd.calls.Load())
	}
	if logs.has("may run again") || !logs.has("WARN", "too large for the record store", "scope=POST /reports") {
		t.Fatalf("logged %q; want a warning that the response was recorded without its body", logs.msgs)
	}
}
