package httpx

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestHeaderValueWithNewlineReplays: a handler that put a CR or LF in a replayed header field (a
// Location built from user input) had its response sent, net/http turning each into a space, but
// stored as written, which the replay refuses to read (a value with control characters): every
// duplicate got 500 "stored response cannot be read", for as long as the record lived. The value is
// stored as net/http sends it, and replayed so (found by a defect hunt).
func TestHeaderValueWithNewlineReplays(t *testing.T) {
	g := memoryGuard(t, nil)
	srv := httptest.NewServer(Middleware(g, nil)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", "/orders/1\r\nX-Injected: 1 ")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"id":1}`)
	})))
	defer srv.Close()
	do := func() (*http.Response, string) {
		r, _ := http.NewRequest("POST", srv.URL+"/orders", strings.NewReader(`{}`))
		r.Header.Set("Idempotency-Key", "k-nl")
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	first, firstBody := do()
	again, againBody := do()
	if again.StatusCode != first.StatusCode || againBody != firstBody || again.Header.Get(ReplayedHeader) != "true" {
		t.Fatalf("duplicate: %d %q (replayed %q), want the first response %d %q", again.StatusCode, againBody,
			again.Header.Get(ReplayedHeader), first.StatusCode, firstBody)
	}
	if got, want := again.Header.Get("Location"), first.Header.Get("Location"); got != want || again.Header.Get("X-Injected") != "" {
		t.Fatalf("replayed Location %q (X-Injected %q), want %q as first sent", got, again.Header.Get("X-Injected"), want)
	}
}
