package httpx

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
)

// step is one request of a scenario and what its response must be.
type step struct {
	req func() *http.Request
	// async runs the request in the background (its handler blocks, X-Test-Block) and waits until
	// the handler is entered; the next release step lets it finish and checks it.
	async   bool
	release bool
	status  int
	problem string // problem type name, "" for a handler or replayed response
	replay  bool   // Idempotent-Replayed: true expected
	calls   int64  // handler calls so far; -1 to skip
	// sameAs is the index of an earlier step whose response must be repeated byte for byte.
	sameAs int
	// retryAfter is the range [min, max] the Retry-After seconds of an in-flight answer must be
	// in; zero checks only that it is positive.
	retryAfter [2]int
}

func post(key, body string, hdr ...string) func() *http.Request {
	return func() *http.Request { return req(http.MethodPost, "/orders", key, body, hdr...) }
}

func TestStatusTable(t *testing.T) {
	rows := []struct {
		name   string
		opts   *Options
		gopts  *idemkit.Options
		before func(bd *bundle)
		steps  []step
	}{
		{name: "missing key", steps: []step{
			{req: post("", `{"a":1}`), status: 400, problem: ProblemMissingKey, calls: 0},
		}},
		{name: "malformed key", steps: []step{
			{req: post(`"unterminated`, `{}`), status: 400, problem: ProblemInvalidKey, calls: 0},
			{req: post(`a b`, `{}`), status: 400, problem: ProblemInvalidKey, calls: 0},
			{req: post(`"a";bad key`, `{}`), status: 400, problem: ProblemInvalidKey, calls: 0},
		}},
		{name: "key too long", steps: []step{
			{req: post(strings.Repeat("k", DefaultMaxKeyLen+1), `{}`), status: 400, problem: ProblemInvalidKey, calls: 0},
			{req: post(strings.Repeat("k", DefaultMaxKeyLen), `{}`), status: 201, calls: 1},
		}},
		{name: "key list or repeated", steps: []step{
			{req: post(`"a", "b"`, `{}`), status: 400, problem: ProblemInvalidKey, calls: 0},
			{req: post(`a`, `{}`, "Idempotency-Key", "b"), status: 400, problem: ProblemInvalidKey, calls: 0},
		}},
		{name: "first run then replay", steps: []step{
			{req: post(`"k1"`, `{"a":1}`), status: 201, calls: 1},
			{req: post(`"k1"`, `{"a":1}`), status: 201, replay: true, calls: 1, sameAs: 1},
			{req: post(`k1`, `{ "a" : 1.0 }`), status: 201, replay: true, calls: 1, sameAs: 1},
			{req: post(`"k2"`, `{"a":1}`), status: 201, calls: 2},
		}},
		{name: "payload mismatch", steps: []step{
			{req: post("k", `{"a":1}`), status: 201, calls: 1},
			{req: post("k", `{"a":2}`), status: 422, problem: ProblemPayloadMismatch, calls: 1},
			{req: post("k", `raw bytes`, "Content-Type", "text/plain"), status: 422, problem: ProblemPayloadMismatch, calls: 1},
		}},
		{name: "in flight", steps: []step{
			{req: post("k", `{}`, "X-Test-Block", "1"), async: true},
			// The hint is DefaultInFlightRetryAfter (1 s), not the 30 s lease the holder may use.
			{req: post("k", `{}`), status: 409, problem: ProblemInFlight, calls: 1, retryAfter: [2]int{1, 1}},
			{release: true, status: 201, calls: 1},
			{req: post("k", `{}`), status: 201, replay: true, calls: 1},
		}},
		{name: "in flight, Retry-After bounded by InFlightRetryAfter", opts: &Options{InFlightRetryAfter: 5 * time.Second},
			steps: []step{
				{req: post("k", `{}`, "X-Test-Block", "1"), async: true},
				{req: post("k", `{}`), status: 409, problem: ProblemInFlight, calls: 1, retryAfter: [2]int{5, 5}},
				{release: true, status: 201, calls: 1},
			}},
		{name: "in flight, Retry-After from the remaining lease", opts: &Options{InFlightRetryAfter: time.Minute},
			gopts: &idemkit.Options{Lease: 3 * time.Second}, steps: []step{
				{req: post("k", `{}`, "X-Test-Block", "1"), async: true},
				{req: post("k", `{}`), status: 409, problem: ProblemInFlight, calls: 1, retryAfter: [2]int{1, 3}},
				{release: true, status: 201, calls: 1},
			}},
		{name: "in flight on a DTM route", opts: &Options{DTM: true}, steps: []step{
			{req: post("k", `{}`, "X-Test-Block", "1"), async: true},
			{req: post("k", `{}`), status: 425, problem: ProblemInFlight, calls: 1},
			{release: true, status: 201, calls: 1},
		}},
		{name: "body over the limit", opts: &Options{MaxBodyBytes: 16}, steps: []step{
			{req: post("k", `{"a":"`+strings.Repeat("x", 32)+`"}`), status: 413, problem: ProblemBodyTooLarge, calls: 0},
			{req: post("k", `{"a":1}`), status: 201, calls: 1},
		}},
		{name: "store unavailable", before: func(bd *bundle) { bd.store.fail.Store(true) }, steps: []step{
			{req: post("k", `{}`), status: 503, problem: ProblemUnavailable, calls: 0},
		}},
		{name: "lock unavailable", before: func(bd *bundle) { bd.locker.fail.Store(true) }, steps: []step{
			{req: post("k", `{}`), status: 503, problem: ProblemUnavailable, calls: 0},
		}},
		{name: "store unavailable, RunUnguardedOnOutage passes through", opts: &Options{RunUnguardedOnOutage: true},
			before: func(bd *bundle) { bd.store.fail.Store(true) }, steps: []step{
				{req: post("k", `{}`), status: 201, calls: 1},
				{req: post("k", `{}`), status: 201, calls: 2}, // unguarded: the danger RunUnguardedOnOutage documents
			}},
		{name: "unguarded methods pass through", steps: []step{
			{req: func() *http.Request { return req(http.MethodGet, "/orders", "", "") }, status: 201, calls: 1},
			{req: func() *http.Request { return req(http.MethodPut, "/orders", "", "") }, status: 201, calls: 2},
			{req: func() *http.Request { return req(http.MethodDelete, "/orders", "", "") }, status: 201, calls: 3},
		}},
		{name: "optional key", opts: &Options{Optional: true}, steps: []step{
			{req: post("", `{}`), status: 201, calls: 1},
			{req: post("", `{}`), status: 201, calls: 2},
			{req: post("k", `{}`), status: 201, calls: 3},
			{req: post("k", `{}`), status: 201, replay: true, calls: 3},
		}},
		{name: "reject duplicates", opts: &Options{Duplicates: Reject}, steps: []step{
			{req: post("k", `{}`), status: 201, calls: 1},
			{req: post("k", `{}`), status: 409, problem: ProblemDuplicate, calls: 1},
		}},
		{name: "response over the storage limit", opts: &Options{MaxResponseBytes: 10}, steps: []step{
			{req: post("k", `{}`, "X-Test-Size", "100"), status: 201, calls: 1},
			{req: post("k", `{}`, "X-Test-Size", "100"), status: 409, problem: ProblemResponseNotStored, calls: 1},
		}},
		{name: "5xx releases the claim", steps: []step{
			{req: post("k", `{}`, "X-Test-Status", "503"), status: 503, calls: 1},
			{req: post("k", `{}`, "X-Test-Status", "500"), status: 500, calls: 2},
			{req: post("k", `{}`), status: 201, calls: 3},
			{req: post("k", `{}`), status: 201, replay: true, calls: 3},
		}},
		{name: "401, 408 and 429 release the claim", steps: []step{
			{req: post("k", `{}`, "X-Test-Status", "408"), status: 408, calls: 1},
			{req: post("k", `{}`, "X-Test-Status", "429"), status: 429, calls: 2},
			{req: post("k", `{}`, "X-Test-Status", "401"), status: 401, calls: 3},
			{req: post("k", `{}`, "X-Test-Status", "202"), status: 202, calls: 4},
			{req: post("k", `{}`), status: 202, replay: true, calls: 4},
		}},
		{name: "403 is stored and replayed", steps: []step{
			{req: post("k", `{}`, "X-Test-Status", "403"), status: 403, calls: 1},
			{req: post("k", `{}`), status: 403, replay: true, calls: 1, sameAs: 1},
		}},
		{name: "4xx is stored and replayed", steps: []step{
			{req: post("k", `{}`, "X-Test-Status", "422"), status: 422, calls: 1},
			{req: post("k", `{}`), status: 422, replay: true, calls: 1, sameAs: 1},
		}},
		{name: "custom store policy", opts: &Options{StorePolicy: func(s int) bool { return s == 201 }}, steps: []step{
			{req: post("k", `{}`, "X-Test-Status", "422"), status: 422, calls: 1},
			{req: post("k", `{}`), status: 201, calls: 2},
			{req: post("k", `{}`), status: 201, replay: true, calls: 2},
		}},
		{name: "noise fields and number forms do not change the fingerprint",
			opts: &Options{Noise: []string{"clientRequestTime", "meta.nonce"}}, steps: []step{
				{req: post("k", `{"a":1,"clientRequestTime":"t1","meta":{"nonce":1,"v":[1,2]}}`), status: 201, calls: 1},
				{req: post("k", `{"meta":{"v":[1.0,2e0],"nonce":2},"a":10e-1,"clientRequestTime":"t2"}`), status: 201, replay: true, calls: 1},
				{req: post("k", `{"meta":{"v":[2,1]},"a":1}`), status: 422, problem: ProblemPayloadMismatch, calls: 1},
			}},
		{name: "no fingerprint", opts: &Options{NoFingerprint: true}, steps: []step{
			{req: post("k", `{"a":1}`), status: 201, calls: 1},
			{req: post("k", `{"a":2}`), status: 201, replay: true, calls: 1, sameAs: 1},
		}},
		{name: "principal refused", opts: &Options{Principal: func(*http.Request) (string, error) { return "", errors.New("no user") }},
			steps: []step{{req: post("k", `{}`), status: 403, problem: ProblemPrincipal, calls: 0}}},
	}
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			for _, row := range rows {
				t.Run(row.name, func(t *testing.T) {
					bd := setup(t, b, row.opts, row.gopts)
					if row.before != nil {
						row.before(bd)
					}
					runSteps(t, bd, row.steps)
				})
			}
		})
	}
}

func runSteps(t *testing.T, bd *bundle, steps []step) {
	t.Helper()
	recs := make([]*httptest.ResponseRecorder, len(steps)+1) // 1-based for sameAs
	var wg sync.WaitGroup
	var async *httptest.ResponseRecorder
	for i, s := range steps {
		var rec *httptest.ResponseRecorder
		switch {
		case s.async:
			async = httptest.NewRecorder()
			r := s.req()
			wg.Go(func() { bd.handler.ServeHTTP(async, r) })
			<-bd.entered
			continue
		case s.release:
			bd.unblock()
			wg.Wait()
			rec = async
		default:
			rec = bd.do(s.req())
		}
		recs[i+1] = rec
		checkStep(t, i+1, bd, s, rec, recs)
	}
	bd.unblock()
	wg.Wait()
}

func checkStep(t *testing.T, n int, bd *bundle, s step, rec *httptest.ResponseRecorder, recs []*httptest.ResponseRecorder) {
	t.Helper()
	if rec.Code != s.status {
		t.Fatalf("step %d: status %d, want %d; body %s", n, rec.Code, s.status, rec.Body)
	}
	if got := problemType(rec); got != s.problem {
		t.Errorf("step %d: problem type %q, want %q; body %s", n, got, s.problem, rec.Body)
	}
	if got := rec.Header().Get(ReplayedHeader) == "true"; got != s.replay {
		t.Errorf("step %d: replayed %v, want %v", n, got, s.replay)
	}
	if s.calls >= 0 && bd.calls.Load() != s.calls {
		t.Errorf("step %d: handler called %d times, want %d", n, bd.calls.Load(), s.calls)
	}
	if s.problem == ProblemInFlight {
		ra, err := strconv.Atoi(rec.Header().Get("Retry-After"))
		if err != nil || ra < 1 {
			t.Errorf("step %d: Retry-After %q, want a positive number of seconds", n, rec.Header().Get("Retry-After"))
		}
		if lo, hi := s.retryAfter[0], s.retryAfter[1]; hi > 0 && (ra < lo || ra > hi) {
			t.Errorf("step %d: Retry-After %d, want within [%d, %d]", n, ra, lo, hi)
		}
		var p struct{ RetryAfter int }
		if err := jsonUnmarshal(rec.Body.Bytes(), &p); err != nil || p.RetryAfter != ra {
			t.Errorf("step %d: problem retryAfter %d, header %d (%v)", n, p.RetryAfter, ra, err)
		}
	}
	if s.problem == "" && !s.replay {
		if rec.Header().Get("Set-Cookie") == "" {
			t.Errorf("step %d: the first response lost the handler's Set-Cookie", n)
		}
	}
	if s.replay {
		for _, h := range []string{"Set-Cookie", "X-Internal"} {
			if v := rec.Header().Get(h); v != "" {
				t.Errorf("step %d: replay carries %s: %q", n, h, v)
			}
		}
		if rec.Header().Get("Location") == "" || rec.Header().Get("Content-Type") != "application/json" {
			t.Errorf("step %d: replay lost allow-listed headers: %v", n, rec.Header())
		}
	}
	if s.sameAs > 0 {
		orig := recs[s.sameAs]
		if rec.Body.String() != orig.Body.String() || rec.Code != orig.Code {
			t.Errorf("step %d: replayed %d %q, original %d %q", n, rec.Code, rec.Body, orig.Code, orig.Body)
		}
		for _, h := range []string{"Location", "Content-Type"} {
			if rec.Header().Get(h) != orig.Header().Get(h) {
				t.Errorf("step %d: %s %q, original %q", n, h, rec.Header().Get(h), orig.Header().Get(h))
			}
		}
	}
}

// TestLossyBodiesKeepTheirDifference: JSON bodies whose strings decode lossily (invalid UTF-8, an
// unpaired surrogate escape, all U+FFFD to encoding/json) are fingerprinted by their bytes: two that
// differ are a mismatch, not a replay of the other's response; the same body again is a replay.
func TestLossyBodiesKeepTheirDifference(t *testing.T) {
	bd := setup(t, memoryBackend, nil, nil)
	for i, pair := range [][2]string{
		{`{"a":"\ud800"}`, `{"a":"\udc00"}`},
		{`{"a":"\ud800"}`, `{"a":"\ufffd"}`},
		{"{\"a\":\"\xff\"}", "{\"a\":\"\xfe\"}"},
	} {
		key := "lossy-" + strconv.Itoa(i)
		if rec := bd.do(req("POST", "/orders", key, pair[0])); rec.Code != http.StatusCreated {
			t.Fatalf("%s: first %d %s", pair[0], rec.Code, rec.Body)
		}
		if rec := bd.do(req("POST", "/orders", key, pair[0])); rec.Code != http.StatusCreated || rec.Header().Get(ReplayedHeader) != "true" {
			t.Fatalf("%s again: %d replayed=%q, want the replay", pair[0], rec.Code, rec.Header().Get(ReplayedHeader))
		}
		if rec := bd.do(req("POST", "/orders", key, pair[1])); rec.Code != http.StatusUnprocessableEntity {
			t.Fatalf("%s after %s: %d %s, want 422", pair[1], pair[0], rec.Code, rec.Body)
		}
	}
}
