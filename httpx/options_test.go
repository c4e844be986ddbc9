package httpx

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/memory"
)

func TestOptionsValidation(t *testing.T) {
	guard, err := idemkit.New(memory.NewStore(), nil)
	if err != nil {
		t.Fatal(err)
	}
	bad := map[string]*Options{
		"empty methods":         {Methods: []string{}},
		"lower-case method":     {Methods: []string{"post"}},
		"method with space":     {Methods: []string{"PO ST"}},
		"negative key length":   {MaxKeyLen: -1},
		"negative body limit":   {MaxBodyBytes: -1},
		"negative response cap": {MaxResponseBytes: -1},
		"unknown policy":        {Duplicates: 7},
		"Set-Cookie replayed":   {ReplayHeaders: []string{"set-cookie"}},
		"hop-by-hop replayed":   {ReplayHeaders: []string{"Transfer-Encoding"}},
		"bad header name":       {ReplayHeaders: []string{"X Y"}},
		"bad noise path":        {Noise: []string{"a..b"}},
		"empty noise":           {Noise: []string{""}},
		"negative retry hint":   {InFlightRetryAfter: -time.Second},
		"Content-Encoding":      {ReplayHeaders: []string{"content-encoding"}},
		"Proxy-* header":        {ReplayHeaders: []string{"Proxy-Status"}},
	}
	for name, o := range bad {
		if _, err := New(guard, o); err == nil || !strings.HasPrefix(err.Error(), "httpx: invalid options") {
			t.Errorf("%s: New returned %v", name, err)
		}
	}
	if _, err := New(nil, nil); err == nil {
		t.Error("nil guard accepted")
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("Middleware with invalid options did not panic")
			}
		}()
		Middleware(guard, &Options{MaxKeyLen: -1})
	}()
	func() {
		defer func() {
			if recover() == nil {
				t.Error("Middleware(nil handler) did not panic")
			}
		}()
		Middleware(guard, nil)(nil)
	}()
	// The zero value works and the caller's struct is copied, not kept.
	o := &Options{}
	mw := Middleware(guard, o)
	o.Methods = []string{"GET"}
	rec := serveOnce(mw, req("GET", "/x", "", ""))
	if rec.Code != 200 {
		t.Fatalf("GET after changing the caller's options: %d", rec.Code)
	}
	if rec := serveOnce(mw, req("POST", "/x", "", "")); rec.Code != 400 {
		t.Fatalf("POST without a key: %d", rec.Code)
	}
	// Custom replay headers are canonicalised and kept.
	cfg, err := (&Options{ReplayHeaders: []string{"x-trace", "X-Trace", "content-type"}}).withDefaults()
	if err != nil || strings.Join(cfg.replay, ",") != "Content-Type,X-Trace" {
		t.Fatalf("replay headers %v, %v", cfg.replay, err)
	}
}

func serveOnce(mw func(http.Handler) http.Handler, r *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})).ServeHTTP(rec, r)
	return rec
}
