package lock

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idemkit/internal/testsvc"
)

// TestBigCachedResultHoldsUpNoOtherKey: with automatic pipelining (MaxInFlight 1 by default), every
// command waits while a round trip is out, and a replay of a large cached result is a long one: the
// whole result comes back before the round trip ends. One caller replaying a 32 MiB result in a loop
// cut the Acquires of other keys from 3,564 to 21 in two seconds (p50 0.16 ms to 355 ms; found by a
// defect hunt). The Acquires of a key known to hold a cached result of 1 MiB or more — cached by this
// Locker, or answered so once — now go on their own, as the caching of such a result does, and hold
// up no other key's command.
func TestBigCachedResultHoldsUpNoOtherKey(t *testing.T) {
	prefix := testsvc.Name("idemkit_test_") + ":"
	writer := testsvc.Redis(t)
	testsvc.CleanRedis(t, writer, prefix)
	rdb := redis.NewClient(testsvc.RedisOptions())
	t.Cleanup(func() { _ = rdb.Close() })
	l := New(rdb, &Options{Prefix: prefix})
	other := New(writer, &Options{Prefix: prefix}) // another process's Locker
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	big := append([]byte{1}, bytes.Repeat([]byte("r"), soloLen)...)

	for _, how := range []string{"cached here", "cached by another process"} {
		t.Run(how, func(t *testing.T) {
			key := "big " + how
			cacher := l
			if how != "cached here" {
				cacher = other
			}
			must(t, acquireErr(cacher.Acquire(ctx, key, "t", time.Minute)))
			must(t, cacher.Release(ctx, key, "t", big, time.Minute))
			if how != "cached here" { // answered once (batched: nothing tells it apart yet)
				if v, err := l.Acquire(ctx, key, "t2", time.Minute); err != nil || !bytes.Equal(v, big) {
					t.Fatalf("first replay: %d bytes, %v", len(v), err)
				}
			}
			g := newGate(l.key(key))
			rdb.AddHook(g)
			replay := make(chan error, 1)
			go func() {
				v, err := l.Acquire(ctx, key, "t3", time.Minute)
				if err == nil && !bytes.Equal(v, big) {
					t.Errorf("replay: %d bytes, want %d", len(v), len(big))
				}
				replay <- err
			}()
			<-g.entered // the replay is out, held
			small := make(chan error, 1)
			go func() {
				_, err := l.Acquire(ctx, "small "+how, "t", time.Minute)
				small <- err
			}()
			select {
			case err := <-small:
				must(t, err)
			case <-time.After(5 * time.Second):
				t.Errorf("an Acquire of another key waited behind the replay of a %d-byte result", len(big))
				close(g.open)
				must(t, <-small)
				must(t, <-replay)
				return
			}
			close(g.open)
			must(t, <-replay)
		})
	}
}

func acquireErr(_ []byte, err error) error { return err }

// TestBigKeysBounded: the keys known to hold a large result are at most maxBigKeys, and a key found
// holding a small value again is forgotten.
func TestBigKeysBounded(t *testing.T) {
	var b bigKeys
	for i := range maxBigKeys + 10 {
		b.note(fmt.Sprint("k", i), true)
	}
	if n := len(b.keys); n != maxBigKeys || int(b.n.Load()) != n {
		t.Fatalf("%d keys remembered (n %d); want %d", n, b.n.Load(), maxBigKeys)
	}
	last := fmt.Sprint("k", maxBigKeys+9)
	if !b.has(last) {
		t.Fatal("the last key noted was dropped")
	}
	b.note(last, false)
	if b.has(last) || len(b.keys) != maxBigKeys-1 {
		t.Fatalf("a key holding a small value is still remembered (%d keys)", len(b.keys))
	}
}

// TestBigResultIsNotCopied: a Release with a result copies it when the result may go out in another
// caller's pipeline (the caller may reuse its buffer once it returns), but a result of 1 MiB or more
// is never batched, and was copied all the same: one more copy of every large result per Release.
func TestBigResultIsNotCopied(t *testing.T) {
	prefix := testsvc.Name("idemkit_test_") + ":"
	rdb := testsvc.Redis(t)
	testsvc.CleanRedis(t, rdb, prefix)
	l := New(rdb, &Options{Prefix: prefix})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const size = 8 << 20
	big := append([]byte{1}, bytes.Repeat([]byte("r"), size)...)
	must(t, acquireErr(l.Acquire(ctx, "big", "t", time.Minute)))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	must(t, l.Release(ctx, "big", "t", big, time.Minute))
	runtime.ReadMemStats(&after)
	if n := after.TotalAlloc - before.TotalAlloc; n >= size {
		t.Fatalf("Release of a %d-byte result allocated %d bytes: it copied the result", len(big), n)
	}
}
