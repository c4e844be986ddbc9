package httpx

import (
	"fmt"
	"math"
	"net/http"
	"strings"
	"testing"
)

// TestMaxBodyBytesAtMaxInt64: MaxBodyBytes math.MaxInt64 (no practical limit) is a valid option, but
// reading the body computed limit+1, which overflowed: every guarded request with a body panicked
// (makeslice: cap out of range). The body is read as with any other limit.
func TestMaxBodyBytesAtMaxInt64(t *testing.T) {
	bd := setup(t, memoryBackend, &Options{MaxBodyBytes: math.MaxInt64}, nil)
	for _, length := range []int64{7, -1} { // declared, chunked
		big := `{"a":"` + strings.Repeat("x", 2000) + `"}` // grows the buffer past its first size
		for _, body := range []string{`{"a":1}`, big} {
			r := req("POST", "/orders", fmt.Sprintf("k-max-%d-%d", length, len(body)), body)
			if length < 0 {
				r.ContentLength = -1
			} else {
				r.ContentLength = int64(len(body))
			}
			rec := bd.do(r)
			if rec.Code != http.StatusCreated || !strings.Contains(rec.Body.String(), body) {
				t.Fatalf("length %d, body of %d bytes: %d %.100s, want 201 with the body", length, len(body), rec.Code, rec.Body)
			}
		}
	}
}
