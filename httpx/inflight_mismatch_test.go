package httpx

import "testing"

// TestInFlightOtherPayloadIs422: while a request holds its key, a request with the same key and
// another payload gets 422 payload-mismatch, as the state table says of any state, not 409 in flight
// — a retry of which could only end in the 422; the same payload gets 409 in flight.
func TestInFlightOtherPayloadIs422(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			bd := setup(t, b, nil, nil)
			first := make(chan int, 1)
			go func() { first <- bd.do(req("POST", "/orders", "k", `{"a":1}`, "X-Test-Block", "1")).Code }()
			<-bd.entered
			if rec := bd.do(req("POST", "/orders", "k", `{"a":2}`)); rec.Code != 422 || problemType(rec) != ProblemPayloadMismatch {
				t.Errorf("another payload while in flight: %d %s, want 422 %s", rec.Code, rec.Body, ProblemPayloadMismatch)
			}
			if rec := bd.do(req("POST", "/orders", "k", `{"a":1}`)); rec.Code != 409 || problemType(rec) != ProblemInFlight {
				t.Errorf("the same payload while in flight: %d %s, want 409 %s", rec.Code, rec.Body, ProblemInFlight)
			}
			bd.unblock()
			if code := <-first; code != 201 {
				t.Fatalf("first: %d", code)
			}
			if rec := bd.do(req("POST", "/orders", "k", `{"a":2}`)); rec.Code != 422 {
				t.Errorf("another payload once finished: %d, want 422", rec.Code)
			}
			if n := bd.calls.Load(); n != 1 {
				t.Errorf("handler ran %d times, want 1", n)
			}
		})
	}
}
