package barrier

import (
	"context"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/testsvc"
)

// TestRedisBusinessCannotTouchTheBarrierState: the business body is a function inside the barrier's
// script, and it saw the barrier's own locals (done, origin, ttl, blocked, seen...) as upvalues. A
// body assigning one of those names without "local" — ttl = tonumber(ARGV[2]), a flag named done —
// changed what the barrier then stored, where Redis refuses any other script's assignment of an
// undeclared global: here the barrier key took a TTL of 1 ms, and the redelivery ran the business a
// second time. The body sees none of the barrier's variables: such an assignment is Redis' error
// before anything is written, the barrier keys unset, as for any other Lua error of the business.
func TestRedisBusinessCannotTouchTheBarrierState(t *testing.T) {
	rdb := testsvc.Redis(t)
	ctx := context.Background()
	r, err := NewRedis(rdb, &RedisOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	tag := testsvc.Name("scope_")
	t.Cleanup(func() { deleteTagged(context.Background(), rdb, tag) })
	counter := "{" + tag + "}:runs"
	for _, c := range []struct {
		body, op string
		want     Outcome // of the first delivery
	}{
		{`ttl = 1; return redis.call('INCR', KEYS[1])`, OpAction, Proceed},
		{`done = 'yes'; return redis.call('INCR', KEYS[1])`, OpAction, Proceed},
	} {
		if err := rdb.Del(ctx, counter).Err(); err != nil {
			t.Fatal(err)
		}
		s := NewScript(c.body)
		gid := testsvc.Name("gid-")
		first, _ := NewBranch(TransSaga, gid, "01", c.op)
		res, err := r.Call(ctx, first, &RedisCall{Script: s, Keys: []string{counter}})
		time.Sleep(5 * time.Millisecond)
		n, _ := rdb.Get(ctx, counter).Int()
		switch {
		case err != nil: // Redis refused the body: nothing may have been written
			if n != 0 {
				t.Errorf("business %q failed (%v) after writing", c.body, err)
			}
			continue
		case res.Outcome != c.want:
			t.Errorf("business %q, first %s: %s, want %s (business ran %d times)", c.body, c.op, res.Outcome, c.want, n)
			continue
		}
		redelivery, _ := NewBranch(TransSaga, gid, "01", c.op)
		res, err = r.Call(ctx, redelivery, &RedisCall{Script: s, Keys: []string{counter}})
		if m, _ := rdb.Get(ctx, counter).Int(); err != nil || res.Outcome != Duplicate || m != n {
			t.Errorf("business %q: redelivery of %s %s, %v, business ran %d times; want Duplicate, %d", c.body, c.op, res.Outcome, err, m, n)
		}
	}
}
