package httpx

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/idemkit/idemkit"
)

// Derived keys (JSONFields, All) are "not bound by MaxKeyLen" and only hashed above
// idemkit.MaxStoredLen (128). A Guard with MaxKeyLen 100 (accepted by New, which only asks for 71)
// refused a 110-byte derived key: the client got 400 invalid-key for a valid request. It is hashed
// to fit (found by a defect hunt).
func TestDerivedKeyOverGuardLimit(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) })
	g := memoryGuard(t, &idemkit.Options{MaxKeyLen: 100})
	t.Run("JSONFields", func(t *testing.T) {
		h := Middleware(g, &Options{Key: JSONFields("order.id")})(ok)
		rec := serve(h, req("POST", "/orders", "", `{"order":{"id":"`+strings.Repeat("9", 110)+`"}}`))
		if rec.Code != http.StatusCreated {
			t.Fatalf("110-byte order id, Guard MaxKeyLen 100: %d %s", rec.Code, rec.Body.String())
		}
	})
	t.Run("All", func(t *testing.T) {
		h := Middleware(g, &Options{Key: All(Header("Idempotency-Key"), Query("tenant"))})(ok)
		rec := serve(h, req("POST", "/orders?tenant="+strings.Repeat("t", 50), strings.Repeat("k", 50), `{}`))
		if rec.Code != http.StatusCreated {
			t.Fatalf("All of two 50-byte parts, Guard MaxKeyLen 100: %d %s", rec.Code, rec.Body.String())
		}
	})
}

// A custom KeySource that reads the body with Body (as documented) and treats a failure as "no key
// here" made the handler run with an EMPTY body: loadBody consumed up to MaxBodyBytes+1 bytes of the
// original and kept nothing. The handler now reads the whole body, declared length or chunked
// (found by a defect hunt).
func TestBodyErrorKeepsHandlerBody(t *testing.T) {
	formKey := KeySource(func(r *http.Request) (string, error) {
		b, err := Body(r)
		if err != nil {
			return "", nil // not from the body
		}
		_, k, _ := strings.Cut(string(b), "key=")
		return k, nil
	})
	big := strings.Repeat("x", 2000)
	for _, c := range []struct {
		name string
		opts Options
		key  string
	}{
		{"Optional pass-through", Options{Key: formKey, Optional: true, MaxBodyBytes: 1000}, ""},
		{"NoFingerprint guarded", Options{Key: FirstOf(formKey, Header("Idempotency-Key")), NoFingerprint: true, MaxBodyBytes: 1000}, "k1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := -1
			opts := c.opts
			h := Middleware(memoryGuard(t, nil), &opts)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, err := io.ReadAll(r.Body)
				got = len(b)
				if err != nil {
					http.Error(w, err.Error(), 400)
					return
				}
				w.WriteHeader(http.StatusCreated)
			}))
			for _, chunked := range []bool{false, true} {
				r := req("POST", "/upload", c.key, big)
				r.Header.Set("Content-Type", "text/plain")
				if chunked {
					r.ContentLength = -1
					r.Body = io.NopCloser(strings.NewReader(big))
				}
				rec := serve(h, r)
				if rec.Code != http.StatusRequestEntityTooLarge && got != len(big) {
					t.Fatalf("chunked %v: status %d, handler read %d of %d body bytes without an error", chunked, rec.Code, got, len(big))
				}
			}
		})
	}
}

// Body outside the middleware "reads the body and puts it back"; on a chunked body over
// DefaultMaxBodyBytes it returned ErrBodyTooLarge and left r.Body without the bytes it had read, so a
// handler that then streamed the upload itself got it cut short by 1 MiB (found by a defect hunt).
func TestBodyOutsideMiddlewarePutsBackOnError(t *testing.T) {
	big := strings.Repeat("x", int(DefaultMaxBodyBytes)+100)
	r := req("POST", "/upload", "", "")
	r.ContentLength = -1 // chunked: the size is known only by reading
	r.Body = io.NopCloser(strings.NewReader(big))
	if _, err := Body(r); !errors.Is(err, ErrBodyTooLarge) {
		t.Fatalf("Body of %d bytes: %v, want ErrBodyTooLarge", len(big), err)
	}
	b, err := io.ReadAll(r.Body)
	if err != nil || len(b) != len(big) {
		t.Fatalf("r.Body after Body's error: read %d of %d bytes, %v", len(b), len(big), err)
	}
}
