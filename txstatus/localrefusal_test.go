package txstatus

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// TestLocalRefusalSaysIdemkitRefused: a call refused before anything was sent (no server configured,
// a body that cannot be encoded) read "txstatus: DTM refused …" like DTM's own refusal. It is a
// *RefusedError with Local set that says idemkit refused it, still matching ErrRefused.
func TestLocalRefusalSaysIdemkitRefused(t *testing.T) {
	for name, tc := range map[string]struct {
		c    *Client
		body any
	}{
		"no server":   {&Client{}, map[string]string{}},
		"unencodable": {&Client{Server: "http://127.0.0.1:1/api/dtmsvr"}, map[string]any{"f": func() {}}},
	} {
		err := tc.c.Call(context.Background(), "submit", "g-1", tc.body)
		var ref *RefusedError
		if !errors.Is(err, ErrRefused) || !errors.As(err, &ref) || !ref.Local {
			t.Fatalf("%s: %v, want a local *RefusedError matching ErrRefused", name, err)
		}
		if msg := err.Error(); strings.Contains(msg, "DTM refused") || !strings.Contains(msg, "idemkit refused submit of g-1") {
			t.Fatalf("%s: %q, want it to say idemkit refused it, not DTM", name, msg)
		}
	}
	// DTM's own refusal still says DTM refused it.
	err := classify("submit", "g-2", 409, []byte(`{"dtm_result":"FAILURE","message":"current status 'failed', cannot submit"}`))
	var ref *RefusedError
	if !errors.As(err, &ref) || ref.Local || !strings.Contains(err.Error(), "DTM refused submit of g-2") {
		t.Fatalf("DTM's refusal: %v", err)
	}
}
