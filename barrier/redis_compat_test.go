package barrier

// The Redis barrier with LayoutDTMCli against dtmcli's own Redis barrier (BranchBarrier.
// RedisCheckAdjustAmount, which takes a go-redis v8 client) on the same Redis: a branch may be served by
// either, op by op, and nothing changes. Each run plays one order of deliveries with one assignment of
// the two implementations and must leave what the all-dtmcli run leaves: the same amounts after every
// delivery and the same barrier keys and values.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dtm-labs/client/dtmcli"
	redisv8 "github.com/go-redis/redis/v8"
	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testsvc"
)

// redisDiffer runs branch deliveries through dtmcli (go-redis v8) and through this barrier (v9,
// LayoutDTMCli) on the shared test Redis.
type redisDiffer struct {
	t   *testing.T
	v8  *redisv8.Client
	v9  *redis.Client
	rec *recordingScripter
	r   *Redis
	tag string // prefix of every business key, and hash tag of the cluster-form gids
	n   int
}

const redisDiffExpire = 600 // seconds, dtmcli's barrierExpire; the keys outlive the test

func newRedisDiffer(t *testing.T) *redisDiffer {
	t.Helper()
	d := &redisDiffer{t: t, v9: testsvc.Redis(t), tag: testsvc.Name("rdiff_")}
	d.v8 = redisv8.NewClient(&redisv8.Options{Addr: testsvc.RedisAddr()})
	t.Cleanup(func() { _ = d.v8.Close() })
	if err := d.v8.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	d.rec = &recordingScripter{Scripter: d.v9}
	var err error
	if d.r, err = NewRedis(d.rec, &RedisOptions{Layout: LayoutDTMCli, TTL: redisDiffExpire * time.Second}); err != nil {
		t.Fatal(err)
	}
	return d
}

// redisRun is one branch of one run: its query fields and business keys.
type redisRun struct {
	transType, gid, bid string
	balance, settled    string // business keys: the amount an action/try takes, what a confirm settles
}

// newRun returns a branch with fresh business keys (balance 100, settled 0). gid "" means a fresh one;
// the branch id is fresh (unique to this differ) unless bid is given, so runs sharing an adversarial gid
// never share keys.
func (d *redisDiffer) newRun(transType, gid, bid string, tagged bool) *redisRun {
	d.t.Helper()
	d.n++
	ctx := context.Background()
	run := &redisRun{transType: transType, gid: gid, bid: bid}
	if run.gid == "" {
		run.gid = fmt.Sprintf("%s-g%d", d.tag, d.n)
	}
	if run.bid == "" { // unique across test processes too: the adversarial gids are not
		run.bid = fmt.Sprintf("b%sx%d", strings.TrimPrefix(d.tag, "rdiff_"), d.n)
	}
	base := d.tag + ":" + strconv.Itoa(d.n)
	if tagged {
		base = "{" + d.tag + "}:" + strconv.Itoa(d.n)
	}
	run.balance, run.settled = base+":balance", base+":settled"
	for k, v := range map[string]int{run.balance: 100, run.settled: 0} {
		if err := d.v9.Set(ctx, k, v, time.Hour).Err(); err != nil {
			d.t.Fatal(err)
		}
	}
	keys := []string{run.balance, run.settled}
	for _, op := range barrierOps {
		keys = append(keys, escape(run.gid)+"-"+escape(run.bid)+"-"+op+"-01")
	}
	d.t.Cleanup(func() { d.v9.Del(context.Background(), keys...) })
	return run
}

var barrierOps = []string{OpTry, OpConfirm, OpCancel, OpAction, OpCompensate, OpMsg}

// amounts says what each op does: the key and the amount added.
func (run *redisRun) amount(op string) (string, int) {
	switch op {
	case OpTry, OpAction:
		return run.balance, -30
	case OpCancel, OpCompensate:
		return run.balance, +30
	}
	return run.settled, +30 // confirm
}

// deliver runs one delivery of op with implementation i and returns what its error was ("" for none,
// "FAILURE" for the business's refusal, "error" for any other) and the error's text.
func (d *redisDiffer) deliver(run *redisRun, op string, i impl) (string, string) {
	q := map[string][]string{"trans_type": {run.transType}, "gid": {run.gid}, "branch_id": {run.bid}, "op": {op}}
	key, amount := run.amount(op)
	var err error
	switch i {
	case viaDTMCli:
		var bb *dtmcli.BranchBarrier
		if bb, err = dtmcli.BarrierFromQuery(q); err == nil {
			err = bb.RedisCheckAdjustAmount(d.v8, key, amount, redisDiffExpire)
		}
	case viaIdemkit:
		var b *Branch
		if b, err = FromQuery(q); err == nil {
			_, err = d.r.Call(context.Background(), b, AdjustAmount(key, int64(amount)))
		}
	}
	switch {
	case err == nil:
		return "", ""
	case errors.Is(err, dtmcli.ErrFailure) || errors.Is(err, ErrBusinessFailure) && idemkit.IsPermanent(err):
		return "FAILURE", err.Error()
	}
	return "error", err.Error()
}

// state returns the business's amounts.
func (d *redisDiffer) state(run *redisRun) string {
	d.t.Helper()
	v, err := d.v9.MGet(context.Background(), run.balance, run.settled).Result()
	if err != nil {
		d.t.Fatal(err)
	}
	return fmt.Sprintf("%v/%v", v[0], v[1])
}

// barrierKeys returns the dtmcli-layout barrier keys of run's branch (barrier id 01) that exist, with
// their values, the gid and branch id written as "G" and "B"; keys without a TTL are marked.
func (d *redisDiffer) barrierKeys(run *redisRun, gid, bid string) []string {
	d.t.Helper()
	ctx := context.Background()
	var out []string
	for _, op := range barrierOps {
		k := gid + "-" + bid + "-" + op + "-01"
		v, err := d.v9.Get(ctx, k).Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			d.t.Fatal(err)
		}
		ttl := d.v9.TTL(ctx, k).Val()
		mark := ""
		if ttl <= 0 {
			mark = " (no TTL)"
		}
		out = append(out, "G-B-"+op+"-01="+v+mark)
	}
	return out
}

// redisResult is what a run did.
type redisResult struct {
	states, errs []string // after each delivery
	keys         []string
	msgs         []string // the errors' texts, not compared
}

func (r redisResult) String() string {
	return fmt.Sprintf("states %q, errors %q, barrier keys %q", r.states, r.errs, r.keys)
}

func (r redisResult) equal(o redisResult) bool {
	return slices.Equal(r.states, o.states) && slices.Equal(r.errs, o.errs) && slices.Equal(r.keys, o.keys)
}

// play runs seq on a fresh branch of gid (dtmcli's form of it: escaped, as dtmcli reads the query).
func (d *redisDiffer) play(transType, gid, bid string, tagged bool, seq []string, impls []impl) redisResult {
	run := d.newRun(transType, gid, bid, tagged)
	var res redisResult
	for i, op := range seq {
		class, msg := d.deliver(run, op, impls[i])
		res.errs, res.msgs = append(res.errs, class), append(res.msgs, msg)
		res.states = append(res.states, d.state(run))
	}
	res.keys = d.barrierKeys(run, escape(run.gid), escape(run.bid))
	return res
}

var sagaSequences = [][]string{
	{OpAction, OpCompensate}, {OpCompensate, OpAction}, {OpAction, OpAction, OpCompensate, OpCompensate},
	{OpCompensate, OpCompensate, OpAction},
}

// TestRedisDTMCliLayoutDifferential: dtmcli's RedisCheckAdjustAmount and this barrier with
// LayoutDTMCli, mixed in every assignment over every order of try/confirm/cancel (and saga
// action/compensate) tried, with adversarial gids: every run does what the all-dtmcli run does —
// including the cancel after a dtmcli try, which must give the amount back, null compensations and
// hanging tries either way. Gids carrying a hash tag (Redis Cluster's form) keep every key of a call in
// one slot. Values this barrier refuses are refused every time, and leave dtmcli's deliveries alone.
func TestRedisDTMCliLayoutDifferential(t *testing.T) {
	d := newRedisDiffer(t)
	type redisCase struct {
		name, gid, bid string
		tagged         bool   // business keys and gid share a hash tag
		refused        string // as diffCase.refused
	}
	cases := []redisCase{
		{name: "plain"},
		{name: "semicolon", gid: "r;1"},
		{name: "crlf", gid: "r\r\n2"},
		{name: "dashes", gid: "a-b-01-try"},
		{name: "spaces and unicode", gid: " ü 日本 😀 "},
		{name: "braces", gid: "x{y}z"},
		{name: "cluster form", gid: "{" + d.tag + "}-g", tagged: true},
		{name: "128 chars", gid: strings.Repeat("r", 128)},
		{name: "129 chars", gid: strings.Repeat("r", 129), refused: "gid longer than 128 characters"},
		{name: "invalid utf8", gid: "r\xff", refused: "gid not valid UTF-8"},
		{name: "branch with dash", bid: "0-1", refused: "contains '-'"},
		{name: "empty gid", gid: ";"},
	}
	n := 0
	for _, c := range cases {
		for _, tt := range []struct {
			transType string
			seqs      [][]string
		}{{TransTCC, tccSequences}, {TransSaga, sagaSequences}} {
			for _, seq := range tt.seqs {
				refs := map[string]redisResult{}
				// reference: what dtmcli alone does with seq.
				reference := func(seq []string) redisResult {
					key := strings.Join(seq, ",")
					if r, ok := refs[key]; ok {
						return r
					}
					r := d.play(tt.transType, c.gid, c.bid, c.tagged, seq, slices.Repeat([]impl{viaDTMCli}, len(seq)))
					refs[key] = r
					return r
				}
				for _, a := range assignments(len(seq)) {
					n++
					want := reference(seq)
					if c.refused != "" {
						var theirs []string
						for i, op := range seq {
							if a[i] == viaDTMCli {
								theirs = append(theirs, op)
							}
						}
						alone := reference(theirs)
						want = redisResult{keys: alone.keys}
						last := "100/0"
						for _, i := range a {
							if i == viaIdemkit {
								want.errs = append(want.errs, "refused")
							} else {
								want.errs = append(want.errs, alone.errs[0])
								last = alone.states[0]
								alone.errs, alone.states = alone.errs[1:], alone.states[1:]
							}
							want.states = append(want.states, last)
						}
					}
					got := d.play(tt.transType, c.gid, c.bid, c.tagged, seq, a)
					if c.refused != "" {
						for i := range got.errs {
							if a[i] == viaIdemkit {
								if got.errs[i] != "error" || !strings.Contains(got.msgs[i], c.refused) {
									t.Errorf("%s %v by %v: delivery %d: %q, want refused with %q", c.name, seq, a, i, got.msgs[i], c.refused)
								}
								got.errs[i] = "refused"
							}
						}
					}
					if !got.equal(want) {
						t.Errorf("%s %v by %v: %s; want %s (errors %q)", c.name, seq, a, got, want, got.msgs)
					}
					// The reservation: a cancel after a try that took the amount gives it back.
					if seq[0] == OpTry && got.errs[0] == "" && got.states[0] == "70/0" {
						i := slices.Index(seq, OpCancel)
						if got.errs[i] == "" && got.states[i] == got.states[i-1] {
							t.Errorf("%s %v by %v: the try took 30 and the cancel gave nothing back (%q)", c.name, seq, a, got.states)
						}
					}
				}
			}
		}
	}
	t.Logf("%d runs", n)

	// The cluster form: every key of a LayoutDTMCli call (dtmcli's keys: no tag of their own) hashes to
	// the slot of the gid's tag, which the business keys share.
	d.rec.mu.Lock()
	defer d.rec.mu.Unlock()
	tagged := 0
	for _, call := range d.rec.keys {
		if !strings.HasPrefix(call[0], "{"+d.tag+"}") {
			continue
		}
		tagged++
		for _, k := range call {
			if clusterSlot(k) != clusterSlot(call[0]) {
				t.Fatalf("cluster form: key %q in slot %d, %q in %d", k, clusterSlot(k), call[0], clusterSlot(call[0]))
			}
		}
	}
	if tagged == 0 {
		t.Fatal("no call of the cluster form recorded")
	}
}

// TestRedisDTMCliLayoutMsg: a msg op (DoAndSubmit) done by this barrier is seen by dtmcli's
// RedisQueryPrepared as prepared, and one blocked by RedisQueryPrepared (rollback) refuses it.
func TestRedisDTMCliLayoutMsg(t *testing.T) {
	d := newRedisDiffer(t)
	ctx := context.Background()
	run := d.newRun(TransMsg, "", "00", false)
	bb, _ := dtmcli.BarrierFrom(TransMsg, run.gid, "00", OpMsg)
	b, _ := NewBranch(TransMsg, run.gid, "00", OpMsg)
	if _, err := d.r.Call(ctx, b, AdjustAmount(run.balance, -30)); err != nil {
		t.Fatal(err)
	}
	if err := bb.RedisQueryPrepared(d.v8, redisDiffExpire); err != nil {
		t.Fatalf("dtmcli's QueryPrepared after our msg op: %v, want prepared (nil)", err)
	}
	b, _ = NewBranch(TransMsg, run.gid, "00", OpMsg)
	if _, err := d.r.Call(ctx, b, AdjustAmount(run.balance, -30)); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("repeated msg op: %v, want ErrDuplicate", err)
	}

	run = d.newRun(TransMsg, "", "00", false)
	bb, _ = dtmcli.BarrierFrom(TransMsg, run.gid, "00", OpMsg)
	if err := bb.RedisQueryPrepared(d.v8, redisDiffExpire); !errors.Is(err, dtmcli.ErrFailure) {
		t.Fatalf("dtmcli's QueryPrepared before the msg op: %v, want FAILURE", err)
	}
	b, _ = NewBranch(TransMsg, run.gid, "00", OpMsg)
	if _, err := d.r.Call(ctx, b, AdjustAmount(run.balance, -30)); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("msg op after a rollback by QueryPrepared: %v, want ErrDuplicate", err)
	}
	if got := d.state(run); got != "100/0" {
		t.Fatalf("amounts %s, want 100/0", got)
	}
}

func TestNewRedisLayoutValidation(t *testing.T) {
	rdb := testsvc.Redis(t)
	if _, err := NewRedis(rdb, &RedisOptions{Layout: LayoutDTMCli, Prefix: "p"}); err == nil {
		t.Error("a prefix with LayoutDTMCli accepted")
	}
	if _, err := NewRedis(rdb, &RedisOptions{Layout: 7}); err == nil {
		t.Error("unknown layout accepted")
	}
	r, err := NewRedis(rdb, &RedisOptions{Layout: LayoutDTMCli})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewBranch(TransTCC, "g", "01", OpTry)
	if _, err := r.Call(context.Background(), b, &RedisCall{Script: NewScript("return 1"), HashTag: "t"}); !errors.Is(err, ErrCrossSlot) {
		t.Errorf("HashTag with LayoutDTMCli: %v, want ErrCrossSlot", err)
	}
	for _, f := range [][2]string{{"0-1", OpTry}, {"01", "tr-y"}} {
		b, _ := NewBranch(TransTCC, "g", f[0], f[1])
		if _, err := r.Call(context.Background(), b, &RedisCall{Script: NewScript("return 1")}); !errors.Is(err, ErrInvalidBranch) {
			t.Errorf("branch_id %q op %q with LayoutDTMCli: %v, want ErrInvalidBranch", f[0], f[1], err)
		}
	}
}
