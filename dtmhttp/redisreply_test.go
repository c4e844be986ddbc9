package dtmhttp_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idemkit/barrier"
	"github.com/idemkit/idemkit/dtmhttp"
	"github.com/idemkit/idemkit/internal/testsvc"
)

// TestRedisStateRepliesAreOutages: a Redis that answers, but that it cannot serve the call now — a
// replica after a failover (READONLY), a server out of memory (OOM), loading its data after a
// restart (LOADING)... — is an outage, not the business's answer: the action is answered 500 and DTM
// calls again, whatever Options.IsPermanent says, and runs once the server serves again. Under a
// classifier that calls every error permanent it was answered 409 FAILURE, and DTM rolled the saga
// back for an outage.
func TestRedisStateRepliesAreOutages(t *testing.T) {
	for _, tc := range []struct {
		name         string
		break_, heal []any
	}{
		// A replica of a master that is not there answers every write READONLY.
		{"READONLY", []any{"REPLICAOF", "127.0.0.1", "1"}, []any{"REPLICAOF", "NO", "ONE"}},
		{"OOM", []any{"CONFIG", "SET", "maxmemory", "1"}, []any{"CONFIG", "SET", "maxmemory", "0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := setup(t, nil, &dtmhttp.Options{IsPermanent: everyErrorPermanent})
			proc := testsvc.StartRedis(t)
			opts := proc.Options()
			opts.MaxRetries = -1
			rdb := redis.NewClient(opts)
			t.Cleanup(func() { _ = rdb.Close() })
			bar, err := barrier.NewRedis(rdb, nil)
			if err != nil {
				t.Fatal(err)
			}
			key := "{acct}:balance"
			if err := rdb.Set(ctxb, key, 100, 0).Err(); err != nil {
				t.Fatal(err)
			}
			action := k.b.Handle(barrier.OpAction, dtmhttp.Redis(bar, func(_ context.Context, p transfer) (*barrier.RedisCall, error) {
				return barrier.AdjustAmount(key, -int64(p.Amount)), nil
			}))
			c := call{"saga", testsvc.Name("gid-"), "01", "action", `{"amount":1}`}
			if err := rdb.Do(ctxb, tc.break_...).Err(); err != nil {
				t.Fatal(err)
			}
			expect(t, action, c, 500, "")
			if err := rdb.Do(ctxb, tc.heal...).Err(); err != nil {
				t.Fatal(err)
			}
			expect(t, action, c, 200, "SUCCESS")
			expectOutcomes(t, k.j, "action:500:-", "action:200:proceed")
			if bal, err := rdb.Get(ctxb, key).Int(); err != nil || bal != 99 {
				t.Fatalf("balance %d, %v; want 99", bal, err)
			}
		})
	}
}
