package httpx

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestNotStoredDetailSaysWhy: a response not stored because of its header fields (a control
// character in a value, which HTTP/1 clients refuse and HTTP/2 drops, so it cannot be replayed
// faithfully) was answered to duplicates "its response was too large to store" although it was two
// bytes long. The detail now says too large only when the response was over MaxResponseBytes, and
// names the limit then.
func TestNotStoredDetailSaysWhy(t *testing.T) {
	bd := setup(t, memoryBackend, &Options{MaxResponseBytes: 10}, nil)
	h := bd.mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ctl" {
			w.Header().Set("Location", "/orders/a\x01b")
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, strings.TrimPrefix(r.URL.Path, "/"))
	}))
	detail := func(path string) string {
		t.Helper()
		var p struct {
			Type   string
			Detail string
		}
		for range 2 {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req("POST", path, "k"+strings.ReplaceAll(path, "/", "-"), `{}`))
			if rec.Code == http.StatusConflict {
				if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil || !strings.HasSuffix(p.Type, ProblemResponseNotStored) {
					t.Fatalf("%s: duplicate got %s", path, rec.Body)
				}
				return p.Detail
			}
		}
		t.Fatalf("%s: duplicate not answered 409", path)
		return ""
	}
	if d := detail("/ctl"); strings.Contains(d, "too large") {
		t.Fatalf("a 3-byte response with an unreplayable header field: detail %q", d)
	}
	if d := detail("/much-longer-than-ten"); !strings.Contains(d, "too large") || !strings.Contains(d, "10 bytes") {
		t.Fatalf("a response over MaxResponseBytes: detail %q; want it too large, naming the limit", d)
	}
}
