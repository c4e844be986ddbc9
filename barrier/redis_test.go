package barrier

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testsvc"
)

// recordingScripter records the keys of every script call: the barrier's and the business's together.
type recordingScripter struct {
	redis.Scripter
	mu   sync.Mutex
	keys [][]string
}

func (r *recordingScripter) record(keys []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.keys = append(r.keys, append([]string(nil), keys...))
}

func (r *recordingScripter) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	r.record(keys)
	return r.Scripter.EvalSha(ctx, sha1, keys, args...)
}

func (r *recordingScripter) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	r.record(keys)
	return r.Scripter.Eval(ctx, script, keys, args...)
}

// clusterSlot is Redis Cluster's key slot: CRC16 (XMODEM) of the hash tag, mod 16384.
func clusterSlot(key string) int {
	var crc uint16
	for _, c := range []byte(hashTag(key)) {
		crc ^= uint16(c) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}

func TestClusterSlot(t *testing.T) {
	// Values from the Redis Cluster specification and CLUSTER KEYSLOT.
	for key, want := range map[string]int{"123456789": 12739, "{user1000}.following": 3443, "foo": 12182} {
		if got := clusterSlot(key); got != want {
			t.Errorf("clusterSlot(%q) = %d, want %d", key, got, want)
		}
	}
}

// TestRedisOneSlot: every key of a call, barrier and business, hashes to one cluster slot, and the
// barrier keys live for the TTL.
func TestRedisOneSlot(t *testing.T) {
	rdb := testsvc.Redis(t)
	ctx := context.Background()
	rec := &recordingScripter{Scripter: rdb}
	r, err := NewRedis(rec, &RedisOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	tag := testsvc.Name("order_")
	t.Cleanup(func() { deleteTagged(context.Background(), rdb, tag) })
	set := NewScript(`redis.call('SET', KEYS[1], ARGV[1]); redis.call('SET', KEYS[2], ARGV[1]); return 'ok'`)
	keys := []string{"{" + tag + "}:a", "x:{" + tag + "}:b"}
	for _, op := range []string{OpTry, OpCancel} {
		b, _ := NewBranch(TransTCC, "gid-with-{braces}-and-:colons", "01", op)
		if _, err := r.Call(ctx, b, &RedisCall{Script: set, Keys: keys, Args: []any{"v"}}); err != nil {
			t.Fatal(err)
		}
	}
	if len(rec.keys) == 0 {
		t.Fatal("no script call recorded")
	}
	for _, call := range rec.keys {
		if len(call) != 4 {
			t.Fatalf("keys %q: want 2 barrier keys and 2 business keys", call)
		}
		for _, k := range call {
			if clusterSlot(k) != clusterSlot(call[0]) {
				t.Fatalf("key %q in slot %d, %q in %d", k, clusterSlot(k), call[0], clusterSlot(call[0]))
			}
		}
		ttl, err := rdb.PTTL(ctx, call[0]).Result()
		if err != nil || ttl <= 0 || ttl > time.Minute {
			t.Fatalf("barrier key %q TTL %s, %v", call[0], ttl, err)
		}
	}
	if _, err := r.Call(ctx, &Branch{TransType: TransTCC, Gid: "g", BranchID: "01", Op: OpTry},
		&RedisCall{Script: set, Keys: []string{"{a}:1", "{b}:1"}}); !errors.Is(err, ErrCrossSlot) {
		t.Fatalf("keys in two slots: %v, want ErrCrossSlot", err)
	}
}

// TestRedisAnyBusiness: the business is any Lua, not an integer amount: here it records an order's
// status string and appends an event, and returns a string.
func TestRedisAnyBusiness(t *testing.T) {
	rdb := testsvc.Redis(t)
	ctx := context.Background()
	r, err := NewRedis(rdb, nil)
	if err != nil {
		t.Fatal(err)
	}
	tag := testsvc.Name("order_")
	t.Cleanup(func() { deleteTagged(context.Background(), rdb, tag) })
	order, events := "{"+tag+"}:order", "{"+tag+"}:events"
	pay := NewScript(`
local status = redis.call('HGET', KEYS[1], 'status')
if status == 'paid' then return redis.error_reply('FAILURE: already paid') end
redis.call('HSET', KEYS[1], 'status', ARGV[1], 'note', ARGV[2])
redis.call('RPUSH', KEYS[2], ARGV[1] .. ':' .. ARGV[2])
return 'status=' .. ARGV[1]`)
	gid := testsvc.Name("gid-")
	call := &RedisCall{Script: pay, Keys: []string{order, events}, Args: []any{"reserved", "3.75 EUR"}}
	for i, want := range []Result{{Proceed, "status=reserved"}, {Outcome: Duplicate}} {
		b, _ := NewBranch(TransSaga, gid, "01", OpAction)
		got, err := r.Call(ctx, b, call)
		if err != nil || got != want {
			t.Fatalf("delivery %d: %+v, %v; want %+v", i, got, err, want)
		}
	}
	if n, _ := rdb.LLen(ctx, events).Result(); n != 1 {
		t.Fatalf("%d events, want 1", n)
	}
	if note, _ := rdb.HGet(ctx, order, "note").Result(); note != "3.75 EUR" {
		t.Fatalf("note %q", note)
	}
	// nil results come back as nil
	b, _ := NewBranch(TransSaga, gid, "02", OpAction)
	got, err := r.Call(ctx, b, &RedisCall{Script: NewScript(`return nil`), Keys: []string{order}})
	if err != nil || got != (Result{Outcome: Proceed}) {
		t.Fatalf("nil business: %+v, %v", got, err)
	}
}

// TestRedisBusinessErrors: a FAILURE reply is a permanent failure; another error reply or a Lua error
// is a plain error; neither sets the barrier keys, so the next delivery runs the business again.
// redisKeyed returns a barrier on the test Redis and a business key of a fresh hash tag, deleted
// with the tag's barrier keys when the test ends.
func redisKeyed(t *testing.T) (*redis.Client, *Redis, string) {
	t.Helper()
	rdb := testsvc.Redis(t)
	r, err := NewRedis(rdb, nil)
	if err != nil {
		t.Fatal(err)
	}
	tag := testsvc.Name("x_")
	t.Cleanup(func() { deleteTagged(context.Background(), rdb, tag) })
	return rdb, r, "{" + tag + "}:k"
}

func TestRedisBusinessErrors(t *testing.T) {
	_, r, key := redisKeyed(t)
	ctx := context.Background()
	// Fails while ARGV[1] says so; counts its successful runs.
	s := NewScript(`
if ARGV[1] == 'failure' then return redis.error_reply('FAILURE: refused') end
if ARGV[1] == 'error' then return redis.error_reply('ERR broken') end
if ARGV[1] == 'raise' then error('raised') end
return redis.call('INCR', KEYS[1])`)
	gid := testsvc.Name("gid-")
	for _, mode := range []string{"failure", "error", "raise"} {
		b, _ := NewBranch(TransSaga, gid, "01", OpAction)
		_, err := r.Call(ctx, b, &RedisCall{Script: s, Keys: []string{key}, Args: []any{mode}})
		if err == nil {
			t.Fatalf("%s: no error", mode)
		}
		if perm := idemkit.IsPermanent(err) && errors.Is(err, ErrBusinessFailure); perm != (mode == "failure") {
			t.Fatalf("%s: %v: permanent business failure = %v", mode, err, perm)
		}
	}
	b, _ := NewBranch(TransSaga, gid, "01", OpAction)
	got, err := r.Call(ctx, b, &RedisCall{Script: s, Keys: []string{key}, Args: []any{"ok"}})
	if err != nil || got != (Result{Proceed, int64(1)}) {
		t.Fatalf("after the failures: %+v, %v; want the business to run", got, err)
	}
	b, _ = NewBranch(TransSaga, gid, "01", OpAction)
	if _, err := r.Call(ctx, b, &RedisCall{Script: NewScript(`return 1 +`), Keys: []string{key}}); err == nil ||
		!strings.Contains(err.Error(), "barrier: redis script") {
		t.Fatalf("syntax error: %v", err)
	}
}

// TestRedisConcurrentDelivery: many simultaneous deliveries, one runs.
func TestRedisConcurrentDelivery(t *testing.T) {
	k := newRedisBank(t)
	gid := testsvc.Name("gid-")
	const n = 16
	outs := make([]Outcome, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			b, _ := NewBranch(TransSaga, gid, "01", OpAction)
			var err error
			if outs[i], err = k.run(context.Background(), b, transOut, adjustBalance, -amount, false); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	proceeded := 0
	for _, o := range outs {
		if o == Proceed {
			proceeded++
		}
	}
	if proceeded != 1 {
		t.Fatalf("%d proceeded: %v", proceeded, outs)
	}
	checkAccounts(t, k, map[int]account{transOut: {initBalance - amount, 0}, transIn: {initBalance, 0}})
}

func TestRedisMsgDuplicate(t *testing.T) {
	k := newRedisBank(t)
	gid := testsvc.Name("gid-")
	for i, want := range []error{nil, ErrDuplicate} {
		b, _ := NewBranch(TransMsg, gid, "00", OpMsg)
		if _, err := k.r.Call(context.Background(), b, &RedisCall{Script: NewScript(`return 1`), Keys: []string{k.key(1)}}); !errors.Is(err, want) {
			t.Fatalf("delivery %d: %v, want %v", i, err, want)
		}
	}
}

func TestNewRedisValidation(t *testing.T) {
	rdb := testsvc.Redis(t)
	if _, err := NewRedis(nil, nil); err == nil {
		t.Error("nil client accepted")
	}
	if _, err := NewRedis(rdb, &RedisOptions{TTL: time.Microsecond}); err == nil {
		t.Error("TTL under a millisecond accepted")
	}
	if _, err := NewRedis(rdb, &RedisOptions{Prefix: "a{b}"}); err == nil {
		t.Error("prefix with braces accepted")
	}
	r, _ := NewRedis(rdb, nil)
	if _, err := r.Call(context.Background(), &Branch{Gid: "g"}, &RedisCall{Script: NewScript("return 1")}); !errors.Is(err, ErrInvalidBranch) {
		t.Errorf("invalid branch: %v", err)
	}
	b, _ := NewBranch(TransSaga, "g", "01", OpAction)
	if _, err := r.Call(context.Background(), b, &RedisCall{}); err == nil {
		t.Error("call without a script accepted")
	}
}

// TestRedisRetryWithTheSameBranch: a call retried with the same Branch after an error uses the same
// barrier id, so a later redelivery finds the keys the successful retry set and skips the business.
// The retry used the next id, and the redelivery (a new Branch, the first id) ran the business again.
func TestRedisRetryWithTheSameBranch(t *testing.T) {
	rdb, r, key := redisKeyed(t)
	ctx := context.Background()
	s := NewScript(`
if ARGV[1] == 'error' then return redis.error_reply('ERR try again') end
return redis.call('INCR', KEYS[1])`)
	gid := testsvc.Name("gid-")
	b, _ := NewBranch(TransSaga, gid, "01", OpAction)
	if _, err := r.Call(ctx, b, &RedisCall{Script: s, Keys: []string{key}, Args: []any{"error"}}); err == nil {
		t.Fatal("no error")
	}
	if got, err := r.Call(ctx, b, &RedisCall{Script: s, Keys: []string{key}, Args: []any{"ok"}}); err != nil || got.Outcome != Proceed {
		t.Fatalf("the retry: %+v, %v", got, err)
	}
	redelivery, _ := NewBranch(TransSaga, gid, "01", OpAction)
	got, err := r.Call(ctx, redelivery, &RedisCall{Script: s, Keys: []string{key}, Args: []any{"ok"}})
	if n, _ := rdb.Get(ctx, key).Int(); err != nil || got.Outcome != Duplicate || n != 1 {
		t.Fatalf("redelivery: %+v, %v, business ran %d times; want Duplicate, once", got, err, n)
	}
}
