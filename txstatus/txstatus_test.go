package txstatus

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		body string
		want Status
		err  bool
	}{
		{`{"branches":[],"transaction":null}`, Unknown, false},
		{`{"branches":[{"op":"action"}],"transaction":{"gid":"g","status":"succeed"}}`, Succeed, false},
		{`{"transaction":{"status":"failed"}}`, Failed, false},
		{`{"transaction":{"status":"prepared"}}`, Prepared, false},
		{`{"transaction":{"status":"submitted"}}`, Submitted, false},
		{`{"transaction":{"status":"aborting"}}`, Aborting, false},
		{`{"transaction":{"status":"weird"}}`, Unknown, true},
		{`not json`, Unknown, true},
	} {
		got, err := parse([]byte(tc.body))
		if got != tc.want || (err != nil) != tc.err {
			t.Errorf("parse(%s) = %q, %v", tc.body, got, err)
		}
	}
}

// TestParseInfo: the stored type and the number of branch operations come with the status, and
// RanNothingFor judges only answers that name the type.
func TestParseInfo(t *testing.T) {
	info, err := parseInfo([]byte(`{"branches":[{"op":"action"},{"op":"compensate"}],"transaction":{"status":"succeed","trans_type":"saga"}}`))
	if err != nil || info != (Info{Status: Succeed, TransType: "saga", Branches: 2}) {
		t.Fatalf("parseInfo = %+v, %v", info, err)
	}
	for _, tc := range []struct {
		info      Info
		transType string
		want      bool
	}{
		{Info{Status: Succeed, TransType: "saga", Branches: 2}, "saga", false},
		{Info{Status: Succeed, TransType: "saga", Branches: 0}, "saga", true}, // boltdb, Redis: the saga's type, the fence's branches
		{Info{Status: Succeed, TransType: "tcc", Branches: 0}, "saga", true},  // a SQL store: the fence's type
		{Info{Status: Succeed, TransType: "tcc", Branches: 4}, "saga", true},
		{Info{Status: Succeed, TransType: "tcc", Branches: 0}, "tcc", false}, // a TCC that joined the fence, with no branch
		{Info{Status: Succeed, TransType: "tcc", Branches: 4}, "tcc", false},
		{Info{Status: Succeed, TransType: "saga", Branches: 2}, "tcc", true},
		{Info{Status: Succeed, TransType: "tcc", Branches: 0}, "", true},
		{Info{Status: Succeed, TransType: "tcc", Branches: 2}, "", false},
		{Info{Status: Succeed}, "saga", false}, // the answer does not say: not judged
		{Info{}, "saga", false},
	} {
		if got := tc.info.RanNothingFor(tc.transType); got != tc.want {
			t.Errorf("%+v.RanNothingFor(%q) = %v", tc.info, tc.transType, got)
		}
	}
}

func TestWaitPollsUntilFinal(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/dtmsvr/query" || r.URL.Query().Get("gid") != "g 1" {
			http.Error(w, "bad request", 400)
			return
		}
		if calls.Add(1) < 3 {
			_, _ = w.Write([]byte(`{"transaction":{"status":"submitted"}}`))
			return
		}
		_, _ = w.Write([]byte(`{"transaction":{"status":"succeed"}}`))
	}))
	defer srv.Close()
	c := &Client{Server: srv.URL + "/api/dtmsvr", PollInterval: time.Millisecond}
	st, err := c.Wait(context.Background(), "g 1")
	if err != nil || st != Succeed || calls.Load() != 3 {
		t.Fatalf("Wait = %q, %v after %d calls", st, err, calls.Load())
	}
	// A bounded wait on a transaction that never settles returns its last status, no error. The
	// bound ends at the third query, two answers in (a timer could end it before the first).
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var queries atomic.Int32
	stuck := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if queries.Add(1) == 3 {
			cancel()
		}
		_, _ = w.Write([]byte(`{"transaction":{"status":"aborting"}}`))
	}))
	defer stuck.Close()
	st, err = (&Client{Server: stuck.URL, PollInterval: 5 * time.Millisecond}).Wait(ctx, "g")
	if err != nil || st != Aborting {
		t.Fatalf("stuck Wait = %q, %v", st, err)
	}
	// A server answering errors is an error, not a status.
	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.Error(w, "boom", 500) }))
	defer broken.Close()
	if _, err := (&Client{Server: broken.URL}).Status(context.Background(), "g"); err == nil {
		t.Fatal("HTTP 500 gave no error")
	}
}

// TestWaitOutlastsOneFailedPoll: one failed query (a gateway's 502 in front of DTM) ended a wait,
// and the caller got an error for a transaction that succeeded at the next poll (found by a defect
// hunt). The wait goes on; only waitTolerance failures in a row end it, with the error.
func TestWaitOutlastsOneFailedPoll(t *testing.T) {
	var calls atomic.Int32
	flaky := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch calls.Add(1) {
		case 1:
			_, _ = w.Write([]byte(`{"transaction":{"status":"submitted"}}`))
		case 2:
			http.Error(w, "bad gateway", http.StatusBadGateway)
		default:
			_, _ = w.Write([]byte(`{"transaction":{"status":"succeed"}}`))
		}
	}))
	defer flaky.Close()
	st, err := (&Client{Server: flaky.URL, PollInterval: time.Millisecond}).Wait(context.Background(), "g")
	if err != nil || st != Succeed {
		t.Fatalf("Wait = %q, %v after %d queries: want succeed", st, err, calls.Load())
	}
	var down atomic.Int32
	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		down.Add(1)
		http.Error(w, "boom", http.StatusInternalServerError)
	}))
	defer broken.Close()
	if _, err := (&Client{Server: broken.URL, PollInterval: time.Millisecond}).Wait(context.Background(), "g"); err == nil || down.Load() != waitTolerance {
		t.Fatalf("Wait on a broken server = %v after %d queries, want an error after %d", err, down.Load(), waitTolerance)
	}
}

func TestNewGID(t *testing.T) {
	a, b := NewGID(), NewGID()
	if a == b || len(a) > 128 || len(a) < 16 {
		t.Fatalf("gids %q %q", a, b)
	}
}

// FuzzParse: the query answer parser never panics and only returns known statuses.
func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"branches":[],"transaction":null}`))
	f.Add([]byte(`{"transaction":{"status":"succeed"}}`))
	f.Add([]byte(`{"transaction":{"status":7}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := parse(b)
		switch st {
		case Unknown, Prepared, Submitted, Aborting, Succeed, Failed:
		default:
			t.Fatalf("parse returned %q", st)
		}
		if err != nil && st != Unknown {
			t.Fatalf("error %v with status %q", err, st)
		}
	})
}
