package dtmhttp_test

// A saga action (or TCC try) whose payload is malformed or oversized is refused (409) and DTM rolls
// back, sending the compensation (cancel) with the same payload. The action never ran, so it is a
// null compensation: Redis must let its barrier skip the call, as Gorm does, instead of refusing the
// payload first with a 500 that DTM retries for as long as the transaction lives.

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dtm-labs/client/dtmcli"

	"github.com/idemkit/idemkit/barrier"
	"github.com/idemkit/idemkit/dtmhttp"
	"github.com/idemkit/idemkit/internal/dtmserver"
	"github.com/idemkit/idemkit/internal/testsvc"
)

// redisAdjust is the Redis business of these tests: balance += delta, refused below zero.
var redisAdjust = barrier.NewScript(`
local bal = tonumber(redis.call('GET', KEYS[1]) or '0')
local delta = tonumber(ARGV[1])
if bal + delta < 0 then return redis.error_reply('FAILURE: insufficient balance') end
return redis.call('INCRBY', KEYS[1], delta)`)

// redisBank is an account in Redis behind a Redis barrier of the given layout.
type redisBank struct {
	k    *bundle
	bar  *barrier.Redis
	acct string
}

// newRedisBank makes an account at key acct (its keys cleaned up with prefix) holding initBalance.
func newRedisBank(t *testing.T, k *bundle, layout barrier.RedisLayout, prefix, acct string) *redisBank {
	t.Helper()
	bar, err := barrier.NewRedis(k.rdb, &barrier.RedisOptions{Layout: layout})
	if err != nil {
		t.Fatal(err)
	}
	testsvc.CleanRedis(t, k.rdb, prefix)
	if err := k.rdb.Set(ctxb, acct, initBalance, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	return &redisBank{k: k, bar: bar, acct: acct}
}

func (b *redisBank) step(sign int) dtmhttp.Business {
	return dtmhttp.Redis(b.bar, func(_ context.Context, p transfer) (*barrier.RedisCall, error) {
		return &barrier.RedisCall{Script: redisAdjust, Keys: []string{b.acct}, Args: []any{sign * p.Amount}}, nil
	})
}

func (b *redisBank) balance(t *testing.T) int {
	t.Helper()
	bal, err := b.k.rdb.Get(ctxb, b.acct).Int()
	if err != nil {
		t.Fatal(err)
	}
	return bal
}

// redisLayouts are the layouts the tests run under. The account's key in the tagged layout hashes on
// a tag of its own, not on the gid's, as an account's does.
var redisLayouts = []struct {
	name   string
	layout barrier.RedisLayout
}{{"Tagged", barrier.LayoutTagged}, {"DTMCli", barrier.LayoutDTMCli}}

// TestRedisMalformedPayloadNullCompensation: by hand, a compensation (cancel) carrying the malformed
// or oversized payload its action (try) was refused for is a null compensation, answered 200; the
// late action is still refused.
func TestRedisMalformedPayloadNullCompensation(t *testing.T) {
	for _, l := range redisLayouts {
		t.Run(l.name, func(t *testing.T) {
			k := setup(t, nil, &dtmhttp.Options{MaxBody: 64})
			gid := testsvc.Name("gid-")
			tag := testsvc.Name("acct-")
			b := newRedisBank(t, k, l.layout, "{"+tag+"}", "{"+tag+"}:balance")
			testsvc.CleanRedis(t, k.rdb, "{"+gid+"}")
			testsvc.CleanRedis(t, k.rdb, gid)
			action := k.b.Handle(barrier.OpAction, b.step(-1))
			compensate := k.b.Handle(barrier.OpCompensate, b.step(+1))
			try := k.b.Handle(barrier.OpTry, b.step(-1))
			cancel := k.b.Handle(barrier.OpCancel, b.step(+1))
			malformed := `{"amount":"thirty"}`
			big := `{"amount":1,"pad":"` + strings.Repeat("x", 100) + `"}`

			expect(t, action, call{"saga", gid, "01", "action", malformed}, 409, "malformed branch payload")
			expect(t, compensate, call{"saga", gid, "01", "compensate", malformed}, 200, "SUCCESS")
			expect(t, action, call{"saga", gid, "02", "action", big}, 409, "larger than 64 bytes")
			expect(t, compensate, call{"saga", gid, "02", "compensate", big}, 200, "SUCCESS")
			expect(t, try, call{"tcc", gid, "03", "try", malformed}, 409, "malformed branch payload")
			expect(t, cancel, call{"tcc", gid, "03", "cancel", malformed}, 200, "SUCCESS")
			// Redelivered: the barrier remembers the null compensation.
			expect(t, compensate, call{"saga", gid, "01", "compensate", malformed}, 200, "SUCCESS")
			expect(t, action, call{"saga", gid, "01", "action", malformed}, 409, "malformed branch payload")
			expectOutcomes(t, k.j, "action:409:-", "compensate:200:null-compensation",
				"action:409:-", "compensate:200:null-compensation",
				"try:409:-", "cancel:200:null-compensation",
				"compensate:200:duplicate", "action:409:-")
			if bal := b.balance(t); bal != initBalance {
				t.Fatalf("balance %d, want %d", bal, initBalance)
			}
		})
	}
}

// TestRedisMalformedPayloadNullCompensationBracedGID: the same with a gid carrying braces ("{tenant}-..."),
// which cannot name a slot as it is: the barrier keys of a call without business keys hash on the gid's
// own tag, or on a digest of a gid whose braces leave it none.
func TestRedisMalformedPayloadNullCompensationBracedGID(t *testing.T) {
	k := setup(t, nil, nil)
	tag := testsvc.Name("acct-")
	b := newRedisBank(t, k, barrier.LayoutTagged, "{"+tag+"}", "{"+tag+"}:balance")
	// The barrier keys of these gids are not named after a prefix to clean up: they expire.
	var err error
	if b.bar, err = barrier.NewRedis(k.rdb, &barrier.RedisOptions{TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	action := k.b.Handle(barrier.OpAction, b.step(-1))
	compensate := k.b.Handle(barrier.OpCompensate, b.step(+1))
	confirm := k.b.Handle(barrier.OpConfirm, b.step(0))
	malformed := `{"amount":"thirty"}`
	for _, gid := range []string{"{" + testsvc.Name("tenant-") + "}-" + testsvc.Name(""), testsvc.Name("a{b}{") + "}"} {
		expect(t, action, call{"saga", gid, "01", "action", malformed}, 409, "malformed branch payload")
		expect(t, compensate, call{"saga", gid, "01", "compensate", malformed}, 200, "SUCCESS")
		expect(t, compensate, call{"saga", gid, "01", "compensate", malformed}, 200, "SUCCESS")
		expect(t, confirm, call{"tcc", gid, "02", "confirm", malformed}, 500, "malformed branch payload")
	}
	expectOutcomes(t, k.j, "action:409:-", "compensate:200:null-compensation", "compensate:200:duplicate", "confirm:500:proceed",
		"action:409:-", "compensate:200:null-compensation", "compensate:200:duplicate", "confirm:500:proceed")
}

// TestRedisMalformedPayloadOfAnOpThatMustRun: when the barrier lets the op through — the action ran
// (here decoded by a more lenient type), or a confirm, which undoes nothing — a payload the op cannot
// read is a bug: 500, retried, and its barrier key is not set, so the fixed handler runs the op.
func TestRedisMalformedPayloadOfAnOpThatMustRun(t *testing.T) {
	for _, l := range redisLayouts {
		t.Run(l.name, func(t *testing.T) {
			k := setup(t, nil, nil)
			gid := testsvc.Name("gid-")
			// The account hashes on the gid's tag, so the tagged layout finds the action's keys
			// without the payload too.
			b := newRedisBank(t, k, l.layout, "{"+gid+"}", "{"+gid+"}:balance")
			testsvc.CleanRedis(t, k.rdb, gid)
			lenient := func(sign int) dtmhttp.Business {
				return dtmhttp.Redis(b.bar, func(_ context.Context, p map[string]any) (*barrier.RedisCall, error) {
					return &barrier.RedisCall{Script: redisAdjust, Keys: []string{b.acct}, Args: []any{sign * 30}}, nil
				})
			}
			payload := `{"amount":"thirty"}`
			expect(t, k.b.Handle(barrier.OpAction, lenient(-1)), call{"saga", gid, "01", "action", payload}, 200, "SUCCESS")
			compensate := k.b.Handle(barrier.OpCompensate, b.step(+1))
			expect(t, compensate, call{"saga", gid, "01", "compensate", payload}, 500, "malformed branch payload")
			expect(t, compensate, call{"saga", gid, "01", "compensate", payload}, 500, "malformed branch payload")
			confirm := k.b.Handle(barrier.OpConfirm, b.step(0))
			expect(t, confirm, call{"tcc", gid, "02", "confirm", payload}, 500, "malformed branch payload")
			if bal := b.balance(t); bal != initBalance-30 {
				t.Fatalf("balance %d after the refused compensation, want %d", bal, initBalance-30)
			}
			// Fixed: the compensation runs now.
			expect(t, k.b.Handle(barrier.OpCompensate, lenient(+1)), call{"saga", gid, "01", "compensate", payload}, 200, "SUCCESS")
			expectOutcomes(t, k.j, "action:200:proceed", "compensate:500:proceed", "compensate:500:proceed",
				"confirm:500:proceed", "compensate:200:proceed")
			if bal := b.balance(t); bal != initBalance {
				t.Fatalf("balance %d after the compensation, want %d", bal, initBalance)
			}
			if !strings.Contains(k.j.log(), "level=ERROR") {
				t.Fatalf("no error logged for a compensation refused on its payload:\n%s", k.j.log())
			}
		})
	}
}

// TestRedisMalformedPayloadSagaRollsBack: against a DTM server, a saga whose second action has a
// malformed payload rolls back to the end: the first action is compensated and the second's
// compensation is skipped, each answered 200 once.
func TestRedisMalformedPayloadSagaRollsBack(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a DTM server")
	}
	srv := dtmserver.StartT(t)
	k := setup(t, nil, nil)
	tag := testsvc.Name("acct-")
	b := newRedisBank(t, k, barrier.LayoutTagged, "{"+tag+"}", "{"+tag+"}:balance")
	p := &paths{}
	mux := http.NewServeMux()
	route := func(path, op string, run dtmhttp.Business) {
		h := k.b.Handle(op, run)
		mux.Handle(path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p.note(r, path)
			h.ServeHTTP(w, r)
		}))
	}
	route("/debit", barrier.OpAction, b.step(-1))
	route("/debitCompensate", barrier.OpCompensate, b.step(+1))
	svc := httptest.NewServer(mux)
	t.Cleanup(svc.Close)

	gid := dtmcli.MustGenGid(srv.URL())
	testsvc.CleanRedis(t, k.rdb, "{"+gid+"}")
	err := dtmcli.NewSaga(srv.URL(), gid).
		Add(svc.URL+"/debit", svc.URL+"/debitCompensate", &transfer{Amount: 10}).
		Add(svc.URL+"/debit", svc.URL+"/debitCompensate", map[string]any{"amount": "twenty"}).Submit()
	if err != nil {
		t.Fatal(err)
	}
	tr := settle(t, srv, k, p, gid, "/debitCompensate")
	if tr.Status != dtmcli.StatusFailed {
		t.Fatalf("saga %s, want failed (rolled back)", tr.Status)
	}
	if got := p.statuses(k, "/debitCompensate"); !slices.Equal(got, []int{http.StatusOK, http.StatusOK}) {
		t.Fatalf("/debitCompensate answered %v, want 200, 200", got)
	}
	if bal := b.balance(t); bal != initBalance {
		t.Fatalf("balance %d after the rollback, want %d", bal, initBalance)
	}
}

// TestRedisMalformedPayloadWithoutBranch: a Request built by hand without a Branch gets the payload
// error, not a panic.
func TestRedisMalformedPayloadWithoutBranch(t *testing.T) {
	k := setup(t, nil, nil)
	tag := testsvc.Name("acct-")
	b := newRedisBank(t, k, barrier.LayoutTagged, "{"+tag+"}", "{"+tag+"}:balance")
	_, err := b.step(+1)(ctxb, &dtmhttp.Request{Payload: []byte(`{"amount":"thirty"}`)})
	if !errors.Is(err, dtmhttp.ErrMalformedPayload) {
		t.Fatalf("err %v, want ErrMalformedPayload", err)
	}
}
