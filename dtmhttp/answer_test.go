package dtmhttp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/dtm-labs/client/dtmcli"
	"github.com/dtm-labs/client/dtmcli/dtmimp"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/barrier"
)

func TestMayFail(t *testing.T) {
	for _, c := range []struct {
		transType, op string
		want          bool
	}{
		{barrier.TransSaga, barrier.OpAction, true},
		{barrier.TransSaga, barrier.OpCompensate, false},
		{barrier.TransTCC, barrier.OpTry, true},
		{barrier.TransTCC, barrier.OpConfirm, false},
		{barrier.TransTCC, barrier.OpCancel, false},
		{barrier.TransMsg, barrier.OpAction, false},
		{barrier.TransWorkflow, barrier.OpAction, true},
		{barrier.TransWorkflow, barrier.OpRollback, false},
		{barrier.TransXA, barrier.OpCommit, false},
	} {
		if got := MayFail(c.transType, c.op); got != c.want {
			t.Errorf("MayFail(%s, %s) = %v, want %v", c.transType, c.op, got, c.want)
		}
	}
}

func TestJudge(t *testing.T) {
	b, err := New(nil)
	if err != nil {
		t.Fatal(err)
	}
	perm := idemkit.Permanent(errors.New("insufficient balance"))
	for _, c := range []struct {
		name      string
		transType string
		op        string
		err       error
		status    int
		result    string
		stuck     bool
	}{
		{"success", "saga", "action", nil, 200, resultSuccess, false},
		{"in flight", "saga", "action", &idemkit.InFlightError{RetryAfter: time.Second}, 425, resultOngoing, false},
		{"in flight wrapped", "tcc", "confirm", fmt.Errorf("guard: %w", idemkit.ErrInFlight), 425, resultOngoing, false},
		{"permanent action", "saga", "action", perm, 409, resultFailure, false},
		{"permanent try", "tcc", "try", fmt.Errorf("wrapped: %w", perm), 409, resultFailure, false},
		{"permanent compensate", "saga", "compensate", perm, 500, "", true},
		{"permanent cancel", "tcc", "cancel", perm, 500, "", true},
		{"permanent confirm", "tcc", "confirm", perm, 500, "", true},
		{"permanent msg action", "msg", "action", perm, 500, "", true},
		{"infrastructure", "saga", "action", errors.New("connection refused"), 500, "", false},
		{"lock unavailable", "saga", "action", fmt.Errorf("%w: timeout", idemkit.ErrLockUnavailable), 500, "", false},
		{"invalid branch", "", "", fmt.Errorf("%w: missing gid", barrier.ErrInvalidBranch), 400, "", false},
		{"wrong op", "saga", "compensate", ErrWrongOp, 400, "", false},
		// dtmcli's own results, as dtmcli.Result2HttpJSON classifies them (issue 11 item 13).
		{"dtmcli failure action", "saga", "action", dtmcli.ErrFailure, 409, resultFailure, false},
		{"dtmcli failure wrapped", "saga", "action", fmt.Errorf("card declined: %w", dtmcli.ErrFailure), 409, resultFailure, false},
		{"dtmcli failure from a nested call", "tcc", "try", dtmcli.ErrorMessage2Error(`{"dtm_result":"FAILURE"}`, dtmcli.ErrFailure), 409, resultFailure, false},
		{"dtmcli failure workflow", "workflow", "action", fmt.Errorf("a: %w", fmt.Errorf("b: %w", dtmcli.ErrFailure)), 409, resultFailure, false},
		{"dtmcli failure compensate", "saga", "compensate", fmt.Errorf("x: %w", dtmcli.ErrFailure), 500, "", true},
		{"dtmcli failure cancel", "tcc", "cancel", dtmcli.ErrFailure, 500, "", true},
		{"dtmcli failure msg action", "msg", "action", dtmcli.ErrFailure, 500, "", true},
		{"dtmcli ongoing", "saga", "action", dtmcli.ErrOngoing, 425, resultOngoing, false},
		{"dtmcli ongoing wrapped", "tcc", "confirm", fmt.Errorf("bank busy: %w", dtmcli.ErrOngoing), 425, resultOngoing, false},
		{"dtmcli ongoing compensate", "saga", "compensate", errors.Join(errors.New("later"), dtmcli.ErrOngoing), 425, resultOngoing, false},
		{"dtmcli failure and ongoing", "saga", "action", errors.Join(dtmcli.ErrOngoing, dtmcli.ErrFailure), 409, resultFailure, false},
		{"permanent ongoing", "saga", "action", idemkit.Permanent(dtmcli.ErrOngoing), 425, resultOngoing, false},
		{"the word only", "saga", "action", errors.New("FAILURE"), 500, "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := b.judge(&Event{TransType: c.transType, Op: c.op}, c.err)
			if v.status != c.status || v.result != c.result || v.stuck != c.stuck {
				t.Fatalf("judge = %+v, want status %d result %q stuck %v", v, c.status, c.result, c.stuck)
			}
		})
	}
}

// TestDTMCliErrorsAreDTMImp: judge recognises dtmcli's sentinels through dtmimp's, which dtmcli
// re-exports (dtmhttp imports the lighter dtmimp).
func TestDTMCliErrorsAreDTMImp(t *testing.T) {
	if dtmcli.ErrFailure != dtmimp.ErrFailure || dtmcli.ErrOngoing != dtmimp.ErrOngoing {
		t.Fatal("dtmcli.ErrFailure/ErrOngoing are no longer dtmimp's: judge must use dtmcli's")
	}
}

// TestAnswerBodyQuiet: DTM searches the whole body for FAILURE and ONGOING, so a message must never
// carry them in upper case: a 500 whose error text says FAILURE would roll a saga back.
func TestAnswerBodyQuiet(t *testing.T) {
	for _, c := range []struct {
		status int
		result string
	}{{500, ""}, {409, resultFailure}, {425, resultOngoing}, {400, ""}} {
		rec := httptest.NewRecorder()
		writeAnswer(rec, c.status, c.result, "upstream said FAILURE, then ONGOING, then SUCCESS")
		body := rec.Body.String()
		var ans answerBody
		if err := json.Unmarshal([]byte(body), &ans); err != nil {
			t.Fatalf("%d: body %q: %v", c.status, body, err)
		}
		if ans.Result != c.result || rec.Code != c.status {
			t.Fatalf("%d: answered %d %+v", c.status, rec.Code, ans)
		}
		rest := strings.Replace(body, `"dtm_result":"`+c.result+`"`, "", 1)
		for _, word := range []string{resultFailure, resultOngoing, resultSuccess} {
			if strings.Contains(rest, word) {
				t.Fatalf("%d: body %q carries %s outside dtm_result", c.status, body, word)
			}
		}
		if rec.Header().Get("Content-Length") == "" || rec.Header().Get("Content-Type") != "application/json" {
			t.Fatalf("%d: headers %v", c.status, rec.Header())
		}
	}
}

func TestDecode(t *testing.T) {
	type transfer struct {
		Amount int `json:"amount"`
	}
	if v, err := Decode[transfer]([]byte(`{"amount":30}`)); err != nil || v.Amount != 30 {
		t.Fatalf("Decode = %+v, %v", v, err)
	}
	if v, err := Decode[transfer](nil); err != nil || v.Amount != 0 {
		t.Fatalf("empty payload: %+v, %v", v, err)
	}
	if v, err := Decode[*transfer]([]byte(`null`)); err != nil || v != nil {
		t.Fatalf("null payload: %+v, %v", v, err)
	}
	if v, err := Decode[[]byte]([]byte(`{"raw":1}`)); err != nil || string(v) != `{"raw":1}` {
		t.Fatalf("raw payload: %q, %v", v, err)
	}
	if v, err := Decode[json.RawMessage]([]byte(`[1]`)); err != nil || string(v) != `[1]` {
		t.Fatalf("RawMessage payload: %q, %v", v, err)
	}
	for _, bad := range []string{`{"amount":"x"}`, `{"amount":1} trailing`, `{`} {
		_, err := Decode[transfer]([]byte(bad))
		if !errors.Is(err, ErrMalformedPayload) || !idemkit.IsPermanent(err) {
			t.Fatalf("Decode(%s) = %v, want a permanent ErrMalformedPayload", bad, err)
		}
	}
}

func TestNewValidates(t *testing.T) {
	for _, o := range []*Options{
		{LockTTL: -time.Second},
		{LockTTL: time.Microsecond},
		{MaxBody: -1},
		{LockPrefix: "a{b}"},
	} {
		if _, err := New(o); err == nil {
			t.Errorf("New(%+v) succeeded", o)
		}
	}
	o := &Options{}
	if _, err := New(o); err != nil || o.LockTTL != 0 {
		t.Fatalf("New(zero) = %v, options changed to %+v", err, o)
	}
}

func TestHandlePanicsOnProgrammerErrors(t *testing.T) {
	run := func(context.Context, *Request) (barrier.Outcome, error) { return barrier.Proceed, nil }
	for name, f := range map[string]func(){
		"nil business": func() { (*Branches)(nil).Handle(barrier.OpAction, nil) },
		"unknown op":   func() { (*Branches)(nil).Handle("refund", run) },
		"msg op":       func() { (*Branches)(nil).Handle(barrier.OpMsg, run) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: Handle did not panic", name)
				}
			}()
			f()
		}()
	}
	var h http.Handler = (*Branches)(nil).Handle(barrier.OpAction, run) // nil Branches: defaults
	if h == nil {
		t.Fatal("nil handler")
	}
}

func TestLockKeyIsUnambiguous(t *testing.T) {
	b, _ := New(&Options{LockPrefix: "svc"})
	k1 := b.LockKey("a:1", "2", "action")
	k2 := b.LockKey("a", "1:2", "action")
	if k1 == k2 {
		t.Fatalf("two branches share lock key %q", k1)
	}
	if got := (*Branches)(nil).LockKey("g", "01", "try"); !strings.HasPrefix(got, DefaultLockPrefix+":") {
		t.Fatalf("nil Branches LockKey = %q", got)
	}
}

// TestJudgeCustomIsPermanentKeepsOwnFailures: a custom IsPermanent that knows only the business's
// errors still gets 409 for the package's own permanent failures (a malformed payload, a Redis
// business's FAILURE reply); they were 500 and retried by DTM forever.
func TestJudgeCustomIsPermanentKeepsOwnFailures(t *testing.T) {
	errInsufficient := errors.New("insufficient")
	b, err := New(&Options{IsPermanent: func(e error) bool { return errors.Is(e, errInsufficient) }})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range []error{
		idemkit.Permanent(fmt.Errorf("%w: bad json", ErrMalformedPayload)),
		idemkit.Permanent(fmt.Errorf("%w: FAILURE: no stock", barrier.ErrBusinessFailure)),
		errInsufficient,
	} {
		if v := b.judge(&Event{TransType: barrier.TransSaga, Op: barrier.OpAction}, e); v.status != http.StatusConflict {
			t.Errorf("%v: %d, want 409", e, v.status)
		}
	}
	if v := b.judge(&Event{TransType: barrier.TransSaga, Op: barrier.OpAction}, errors.New("db down")); v.status != http.StatusInternalServerError {
		t.Errorf("an infrastructure error: %d, want 500", v.status)
	}
}

// TestJudgeRetryableUnderStrictIsPermanent: under a custom IsPermanent that calls every error
// permanent, an error marked idemkit.Retryable is still a 500 (DTM retries), as the Guard classifies
// it; a Permanent mark still wins.
func TestJudgeRetryableUnderStrictIsPermanent(t *testing.T) {
	b, err := New(&Options{IsPermanent: func(error) bool { return true }})
	if err != nil {
		t.Fatal(err)
	}
	ev := &Event{TransType: barrier.TransSaga, Op: barrier.OpAction}
	if v := b.judge(ev, idemkit.Retryable(errors.New("db down"))); v.status != http.StatusInternalServerError {
		t.Errorf("a Retryable error: %d, want 500", v.status)
	}
	if v := b.judge(ev, idemkit.Permanent(idemkit.Retryable(errors.New("no")))); v.status != http.StatusConflict {
		t.Errorf("a Permanent mark over Retryable: %d, want 409", v.status)
	}
}

// TestFailureBodyFitsDTMReason: DTM keeps a saga's rollback reason ("url:<URL> return failed: <body>
// FAILURE") in a varchar(1024); a FAILURE answer is cut to fit beside a URL of 300 characters,
// whatever its escaping, and other answers are not.
func TestFailureBodyFitsDTMReason(t *testing.T) {
	for _, msg := range []string{strings.Repeat("x", 2000), strings.Repeat("<é\"", 700), strings.Repeat("x", 600), "short"} {
		rec := httptest.NewRecorder()
		writeAnswer(rec, http.StatusConflict, resultFailure, msg)
		var ans answerBody
		if err := json.Unmarshal(rec.Body.Bytes(), &ans); err != nil || ans.Result != resultFailure {
			t.Fatalf("body %q: %v", rec.Body, err)
		}
		url := "http://" + strings.Repeat("h", 300) + "/step"
		if n := utf8.RuneCountInString("url:"+url+" return failed: ") + utf8.RuneCount(rec.Body.Bytes()) + len(" FAILURE"); n > 1024 {
			t.Fatalf("DTM's reason would be %d characters", n)
		}
		if head := []rune(msg)[:min(len([]rune(msg)), 100)]; !strings.HasPrefix(ans.Message, string(head)) {
			t.Fatalf("message %.120q does not start the answer's %.120q", msg, ans.Message)
		}
		if ans.Message != msg && !strings.HasSuffix(ans.Message, "…") {
			t.Fatalf("a cut message %.40q does not end with an ellipsis", ans.Message)
		}
	}
	rec := httptest.NewRecorder()
	long := strings.Repeat("x", 2000)
	writeAnswer(rec, http.StatusInternalServerError, "", long)
	if !strings.Contains(rec.Body.String(), long) {
		t.Fatal("a 500's message was cut")
	}
}
