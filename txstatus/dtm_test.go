package txstatus

import (
	"context"
	"errors"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/dtm-labs/client/dtmcli"
	"github.com/dtm-labs/client/dtmcli/dtmimp"

	"github.com/idemkit/idemkit/internal/dtmserver"
)

var shared dtmserver.Shared

func TestMain(m *testing.M) {
	code := m.Run()
	_ = shared.Stop()
	os.Exit(code)
}

// saga is a saga with no steps (DTM succeeds it at once), as dtmcli posts it.
func saga(srv, gid string) *dtmcli.Saga { return dtmcli.NewSaga(srv, gid) }

// TestFenceRefusesLateStarts: a gid DTM never heard of is fenced (an empty TCC registered and aborted):
// its status is failed with the fence's reason, and a late saga submit or TCC prepare of it is refused
// by DTM itself (a *RefusedError, never ErrNoAnswer).
func TestFenceRefusesLateStarts(t *testing.T) {
	srv := shared.Get(t)
	c := &Client{Server: srv.URL()}
	ctx := context.Background()
	gid := NewGID()
	info, err := c.Fence(ctx, gid)
	if err != nil || info.Status != Failed || info.RollbackReason != FenceReason {
		t.Fatalf("Fence of an unknown gid = %+v, %v", info, err)
	}
	err = c.Call(ctx, "submit", gid, &saga(srv.URL(), gid).TransBase)
	var ref *RefusedError
	if !errors.As(err, &ref) || errors.Is(err, ErrNoAnswer) || ref.Op != "submit" || !strings.Contains(ref.Message, "failed") {
		t.Fatalf("late submit of a fenced gid: %v", err)
	}
	tcc := &dtmcli.Tcc{TransBase: *dtmimp.NewTransBase(gid, "tcc", srv.URL(), "")}
	if err := c.Call(ctx, "prepare", gid, &tcc.TransBase); !errors.Is(err, ErrRefused) {
		t.Fatalf("late prepare of a fenced gid: %v", err)
	}
	if st, err := c.Status(ctx, gid); err != nil || st != Failed {
		t.Fatalf("after the late starts: %q, %v", st, err)
	}
	// A second fence changes nothing.
	if info, err := c.Fence(ctx, gid); err != nil || info.Status != Failed {
		t.Fatalf("second Fence = %+v, %v", info, err)
	}
}

// TestFenceFollowsATransactionThatGotThereFirst: a saga DTM already has is left alone (the fence's
// prepare is refused); a TCC still prepared is aborted.
func TestFenceFollowsATransactionThatGotThereFirst(t *testing.T) {
	srv := shared.Get(t)
	c := &Client{Server: srv.URL()}
	ctx := context.Background()

	gid := NewGID()
	if err := c.Call(ctx, "submit", gid, &saga(srv.URL(), gid).TransBase); err != nil {
		t.Fatal(err)
	}
	info, err := c.Fence(ctx, gid)
	if err != nil || (info.Status != Succeed && info.Status != Submitted) {
		t.Fatalf("Fence of a submitted saga = %+v, %v", info, err)
	}

	gid = NewGID()
	tcc := &dtmcli.Tcc{TransBase: *dtmimp.NewTransBase(gid, "tcc", srv.URL(), "")}
	if err := c.Call(ctx, "prepare", gid, &tcc.TransBase); err != nil {
		t.Fatal(err)
	}
	if info, err := c.Fence(ctx, gid); err != nil || info.Status != Failed {
		t.Fatalf("Fence of a prepared TCC = %+v, %v", info, err)
	}
	if err := c.Call(ctx, "submit", gid, &tcc.TransBase); !errors.Is(err, ErrRefused) {
		t.Fatalf("submit of the fenced TCC: %v", err)
	}
}

// TestCallTellsRefusalFromSilence: through a proxy, every answer that is not DTM's own — 502, 503,
// 504 with a gateway's page, a reset connection, a timeout — is ErrNoAnswer, whether or not the call
// reached DTM; only DTM's 409 FAILURE is a refusal.
func TestCallTellsRefusalFromSilence(t *testing.T) {
	srv := shared.Get(t)
	ctx := context.Background()
	release := make(chan struct{})
	defer close(release)
	actions := map[string]dtmserver.ProxyAction{
		"502-forwarded": {Status: http.StatusBadGateway},
		"503-dropped":   {Drop: true, Status: http.StatusServiceUnavailable},
		"504-later":     {Later: release},
		"404-html":      {Drop: true, Status: http.StatusNotFound},
		"reset":         {Reset: true},
		"reset-dropped": {Drop: true, Reset: true},
		"timeout":       {Hold: release},
	}
	var gidCase = map[string]string{}
	p := dtmserver.NewProxy(t, srv, func(r *http.Request) dtmserver.ProxyAction {
		if r.Method != http.MethodPost {
			return dtmserver.ProxyAction{}
		}
		return actions[r.Header.Get("X-Case")]
	})
	for name := range actions {
		gid := NewGID()
		gidCase[gid] = name
		c := &Client{Server: p.URL(), HTTP: &http.Client{Timeout: 300 * time.Millisecond, Transport: caseTransport(name)}}
		err := c.Call(ctx, "submit", gid, &saga(srv.URL(), gid).TransBase)
		if !errors.Is(err, ErrNoAnswer) || errors.Is(err, ErrRefused) {
			t.Errorf("%s: %v, want ErrNoAnswer", name, err)
		}
	}
	// DTM's own refusal, through the same proxy: a submit of a fenced gid.
	gid := NewGID()
	direct := &Client{Server: srv.URL()}
	if _, err := direct.Fence(ctx, gid); err != nil {
		t.Fatal(err)
	}
	c := &Client{Server: p.URL()}
	if err := c.Call(ctx, "submit", gid, &saga(srv.URL(), gid).TransBase); !errors.Is(err, ErrRefused) || errors.Is(err, ErrNoAnswer) {
		t.Fatalf("DTM's refusal through the proxy: %v", err)
	}
}

// caseTransport marks requests with the test case's name.
type caseTransport string

func (c caseTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("X-Case", string(c))
	return http.DefaultTransport.RoundTrip(r)
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		status  int
		body    string
		refused bool
		ok      bool
	}{
		{200, `{"dtm_result":"SUCCESS"}`, false, true},
		{200, `{}`, false, true},
		{409, `{"dtm_result":"FAILURE","message":"current status 'failed', cannot sumbmit"}`, true, false},
		{200, `{"dtm_result":"FAILURE","message":"old server"}`, true, false},
		{409, `<html>conflict</html>`, false, false},
		{502, `{"dtm_result":"FAILURE"}`, false, false},
		{500, `{"message":"store down"}`, false, false},
		{425, `{"dtm_result":"ONGOING"}`, false, false},
		{200, `FAILURE but not json`, false, false},
	} {
		err := classify("submit", "g", tc.status, []byte(tc.body))
		switch {
		case tc.ok && err != nil, tc.refused && !errors.Is(err, ErrRefused),
			!tc.ok && !tc.refused && (!errors.Is(err, ErrNoAnswer) || errors.Is(err, ErrRefused)):
			t.Errorf("classify(%d, %s) = %v", tc.status, tc.body, err)
		}
	}
}

// TestFenceRaceSagaSubmitRanNothing: a saga's submit that lands between the fence's prepare and its
// abort is accepted by DTM v1.19 onto the fence's empty TCC, which it then reports succeed with none of
// the saga's steps stored or run; the fence's abort is refused and Fence reports that Succeed.
// Info.RanNothingFor tells it from the saga the initiator submitted; a TCC that joined the fence and
// submitted is the initiator's.
func TestFenceRaceSagaSubmitRanNothing(t *testing.T) {
	srv := shared.Get(t)
	ctx := context.Background()
	direct := &Client{Server: srv.URL()}
	gid := NewGID()
	late := func() {
		s := saga(srv.URL(), gid).Add("http://127.0.0.1:1/never-called", "http://127.0.0.1:1/never-called", nil)
		if err := direct.Call(ctx, "submit", gid, &s.TransBase); err != nil {
			t.Errorf("the late submit: %v", err)
		}
	}
	c := &Client{Server: srv.URL(), HTTP: &http.Client{Transport: beforeAbort{late}, Timeout: 10 * time.Second},
		PollInterval: 20 * time.Millisecond}
	info, err := c.Fence(ctx, gid)
	if err != nil || info.Status != Succeed {
		t.Fatalf("Fence with a saga submit between prepare and abort = %+v, %v; want DTM's succeed", info, err)
	}
	if info.TransType == "" || info.Branches != 0 || !info.RanNothingFor("saga") || !info.RanNothingFor("") {
		t.Fatalf("the hijacked fence: %+v; want it told from the saga (RanNothingFor)", info)
	}

	// A TCC that prepares on the fence's prepared gid and submits before the abort is genuine.
	gid = NewGID()
	tcc := &dtmcli.Tcc{TransBase: *dtmimp.NewTransBase(gid, "tcc", srv.URL(), "")}
	joined := func() {
		if err := direct.Call(ctx, "prepare", gid, &tcc.TransBase); err != nil {
			t.Errorf("the TCC's prepare on the fence: %v", err)
		}
		if err := direct.Call(ctx, "submit", gid, &tcc.TransBase); err != nil {
			t.Errorf("the TCC's submit: %v", err)
		}
	}
	c.HTTP = &http.Client{Transport: beforeAbort{joined}, Timeout: 10 * time.Second}
	if info, err = c.Fence(ctx, gid); err != nil || info.Status != Succeed || info.RanNothingFor("tcc") {
		t.Fatalf("Fence with a TCC submitted between prepare and abort = %+v, %v", info, err)
	}
}

// beforeAbort runs f before it forwards a POST to DTM's abort endpoint.
type beforeAbort struct{ f func() }

func (b beforeAbort) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/abort") {
		b.f()
	}
	return http.DefaultTransport.RoundTrip(r)
}
