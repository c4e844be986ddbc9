package httpx

import (
	"fmt"
	"net/http"
	"testing"
)

// TestFirstOfSkipsASourceReportingErrKeyMissing: a KeySource may report no key with ErrKeyMissing
// instead of "" (KeySource's documentation); FirstOf goes on to the next source either way, so a
// request carrying the key in a later source is guarded by it, not refused 400 missing-key.
func TestFirstOfSkipsASourceReportingErrKeyMissing(t *testing.T) {
	custom := func(r *http.Request) (string, error) {
		if v := r.Header.Get("X-Order-Ref"); v != "" {
			return v, nil
		}
		return "", fmt.Errorf("no order reference: %w", ErrKeyMissing)
	}
	bd := setup(t, memoryBackend, &Options{Key: FirstOf(custom, Header(DefaultHeader))}, nil)
	first := bd.do(req("POST", "/orders", "k1", `{"a":1}`))
	if first.Code != http.StatusCreated {
		t.Fatalf("key in the second source: %d %s, want 201", first.Code, first.Body)
	}
	again := bd.do(req("POST", "/orders", "k1", `{"a":1}`))
	if again.Code != http.StatusCreated || again.Header().Get(ReplayedHeader) != "true" || bd.calls.Load() != 1 {
		t.Fatalf("retry: %d replayed=%q, handler ran %d times; want the replay of one run", again.Code, again.Header().Get(ReplayedHeader), bd.calls.Load())
	}
	if rec := bd.do(req("POST", "/orders", "", `{"a":1}`)); rec.Code != http.StatusBadRequest || problemType(rec) != ProblemMissingKey {
		t.Fatalf("no key anywhere: %d %s, want 400 missing-key", rec.Code, problemType(rec))
	}
	if rec := bd.do(req("POST", "/orders", "", `{"a":1}`, "X-Order-Ref", "ref-1")); rec.Code != http.StatusCreated {
		t.Fatalf("key in the first source: %d, want 201", rec.Code)
	}
}
