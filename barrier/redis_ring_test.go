package barrier

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idemkit/internal/testsvc"
)

// TestRedisDTMCliLayoutOnARing: a redis.Ring sends a script to the shard of its first key, the
// barrier key, which in LayoutDTMCli is dtmcli's gid-branch_id-op-barrier_id without a hash tag of the
// business's: the business ran on a shard that does not hold its keys. AdjustAmount on a balance that
// exists answered FAILURE (a TCC aborted for no reason) for about half of the gids, and a business
// writing a key wrote it where no reader looks. As on Redis Cluster, where the server refuses such a
// call, a call on a Ring whose business keys do not share the barrier key's hash tag is refused with
// ErrCrossSlot before anything runs; a gid carrying the keys' tag ("{acct7}-...") works.
func TestRedisDTMCliLayoutOnARing(t *testing.T) {
	a, b := testsvc.StartRedis(t), testsvc.StartRedis(t)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": a.Addr(), "b": b.Addr()}})
	t.Cleanup(func() { _ = ring.Close() })
	ctx := context.Background()
	r, err := NewRedis(ring, &RedisOptions{Layout: LayoutDTMCli})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 16 {
		key := fmt.Sprintf("balance:%d", i)
		must(t, ring.Set(ctx, key, 100, 0).Err())
		br, _ := NewBranch(TransTCC, fmt.Sprintf("gid-%d", i), "01", OpTry)
		_, err := r.Call(ctx, br, AdjustAmount(key, -10))
		if err != nil && !errors.Is(err, ErrCrossSlot) {
			t.Fatalf("try on %s, which holds 100: %v; want it done or refused with ErrCrossSlot", key, err)
		}
		if v, _ := ring.Get(ctx, key).Int(); err == nil && v != 90 || err != nil && v != 100 {
			t.Fatalf("try on %s: %v, and the balance is %d", key, err, v)
		}
	}
	for i := range 16 { // the gid carries the business keys' hash tag: every call runs where they are
		tag := fmt.Sprintf("acct%d", i)
		key := "{" + tag + "}:balance"
		must(t, ring.Set(ctx, key, 100, 0).Err())
		br, _ := NewBranch(TransTCC, "{"+tag+"}-gid", "01", OpTry)
		res, err := r.Call(ctx, br, AdjustAmount(key, -10))
		if v, _ := ring.Get(ctx, key).Int(); err != nil || res.Outcome != Proceed || v != 90 {
			t.Fatalf("try on %s with a tagged gid: %s, %v, balance %d; want proceed, 90", key, res.Outcome, err, v)
		}
	}
}
