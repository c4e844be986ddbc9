package main

import (
	"context"
	"net"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestRedisDownIsSkippedAtOnce: the services' Guards fail open, but their Redis client kept
// go-redis's defaults, which dial a refused Redis 5 times and retry each command 3 times with
// backoffs: with Redis down, the first orders took about 5 s each before the database answered them
// (found by a defect hunt). The client now dials once and does not retry, as the README advises
// for FailOpen.
func TestRedisDownIsSkippedAtOnce(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // refused from now on
	opts, err := redisOptions(addr)
	if err != nil {
		t.Fatal(err)
	}
	var dials atomic.Int32
	d := &net.Dialer{}
	opts.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return d.DialContext(ctx, network, addr)
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	if err := rdb.Set(context.Background(), "k", "v", 0).Err(); err == nil {
		t.Fatal("SET on a refused Redis succeeded")
	}
	if n := dials.Load(); n != 1 {
		t.Fatalf("one command on a refused Redis dialled it %d times; want 1 (no dial retries, no command retries)", n)
	}
}
