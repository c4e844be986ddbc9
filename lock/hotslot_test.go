package lock

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/memory"
)

// TestScopeWithBraceSpreadsOverSlots: a scope containing '}' (every chi route pattern with a URL parameter, e.g. "POST
// /orders/{id}", which httpx uses as the scope) cuts the Locker's hash tag short: Redis takes the tag
// from the first '{' to the first '}' after it, so the tag of <prefix>{<len>:<scope>:<key>} ends inside
// the scope and never reaches the idempotency key. Every key of such a route lands in ONE cluster slot
// (one primary takes the whole route's lock and cache traffic) instead of being spread by key (found by a defect hunt).
func TestScopeWithBraceSpreadsOverSlots(t *testing.T) {
	_, node := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	g, err := idemkit.New(memory.NewStore(), nil)
	if err != nil {
		t.Fatal(err)
	}
	l := New(node, nil)
	slots := func(scope string) map[int64]bool {
		seen := map[int64]bool{}
		for i := range 64 {
			a, err := g.Address(scope, fmt.Sprintf("key-%d", i))
			if err != nil {
				t.Fatal(err)
			}
			s, err := node.ClusterKeySlot(ctx, l.Key(a.LockKey)).Result()
			if err != nil {
				t.Fatal(err)
			}
			seen[s] = true
		}
		return seen
	}
	plain := slots("POST /orders")
	braced := slots("POST /orders/{id}")
	t.Logf("64 keys: scope without brace -> %d slots; scope %q -> %d slots (e.g. key %q)",
		len(plain), "POST /orders/{id}", len(braced), l.Key(mustLockKey(t, g, "POST /orders/{id}", "key-0")))
	if len(braced) < len(plain)/2 {
		t.Errorf("64 distinct idempotency keys of scope %q share %d cluster slot(s) (a scope without '}' spreads them over %d): the hash tag stops at the scope's '}'",
			"POST /orders/{id}", len(braced), len(plain))
	}
}

func mustLockKey(t *testing.T, g *idemkit.Guard, scope, key string) string {
	a, err := g.Address(scope, key)
	if err != nil {
		t.Fatal(err)
	}
	return a.LockKey
}
