package lock_test

import (
	"context"
	"fmt"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/memory"
	"github.com/redis/go-redis/v9"
)

// A Guard with the Redis lock and result cache in front of its Store. Duplicates of a running call
// are turned away by Redis in one round trip; duplicates of a finished one are answered from the
// Redis cache in one round trip, without touching the Store.
func Example() {
	rdb := redis.NewClient(&redis.Options{
		Addr:                  "127.0.0.1:6379",
		ContextTimeoutEnabled: true, // let context deadlines bound socket I/O
	})
	defer rdb.Close()

	guard, err := idemkit.New(memory.NewStore(), &idemkit.Options{
		Locker:   lock.New(rdb, &lock.Options{Prefix: "shop:"}),
		FailOpen: true, // on Redis errors rely on the Store alone
	})
	if err != nil {
		panic(err)
	}
	call := idemkit.Call{Scope: "POST /orders", Key: "3f2a9c1e"}
	res, err := guard.Do(context.Background(), call, func(ctx context.Context) ([]byte, error) {
		return []byte(`{"order":42}`), nil // create the order
	})
	fmt.Println(string(res.Value), res.Replayed, err)
}

// Each key is one hash-tagged Redis key: the Locker works on a ClusterClient (or any
// redis.UniversalClient) unchanged.
func ExampleNew_cluster() {
	rdb := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                 []string{"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"},
		ContextTimeoutEnabled: true,
	})
	defer rdb.Close()
	var _ idemkit.Locker = lock.New(rdb, nil) // one Redis key per call: idemkit:{<key>}
}
