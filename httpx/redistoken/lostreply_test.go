package redistoken_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit/httpx"
	"github.com/idemkit/idemkit/httpx/redistoken"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/redis/go-redis/v9"
)

// loseReplies is a go-redis Dialer whose connections, while armed, let the next SET reach Redis and
// be carried out, then lose its reply: the connection breaks as the reply is read, as when a network
// blip or Redis's client-output limits cut a connection. go-redis then sends the command again on a
// new connection (Options.MaxRetries).
type loseReplies struct {
	armed atomic.Bool
	lost  atomic.Int32
}

func (d *loseReplies) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &lossyConn{Conn: c, d: d}, nil
}

type lossyConn struct {
	net.Conn
	d    *loseReplies
	lose bool // a SET was written while armed: its reply is lost
}

func (c *lossyConn) Write(b []byte) (int, error) {
	if c.d.armed.Load() && bytes.Contains(bytes.ToLower(b), []byte("$3\r\nset\r\n")) {
		c.lose = true
	}
	return c.Conn.Write(b)
}

func (c *lossyConn) Read(b []byte) (int, error) {
	if !c.lose {
		return c.Conn.Read(b)
	}
	// Wait for the reply (the command was carried out), then drop it with the connection.
	if _, err := c.Conn.Read(b); err != nil {
		return 0, err
	}
	c.d.armed.Store(false)
	c.d.lost.Add(1)
	_ = c.Conn.Close()
	return 0, io.EOF
}

// TestPutWhoseReplyWasLost: a Put whose SET NX was carried out but whose reply was lost was sent
// again by go-redis, found the token it had just stored, and failed with "token id already stored":
// Tokens.Issue answered 503 for a token Redis held. A Put that finds its own token stored succeeds.
func TestPutWhoseReplyWasLost(t *testing.T) {
	_, shared, prefix := setup(t)
	d := &loseReplies{}
	opts := shared.Options()
	opts.Dialer = d.dial
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		testsvc.Unavailable(t, "Redis", err)
	}
	st := redistoken.New(rdb, &redistoken.Options{Prefix: prefix})
	tokens, err := httpx.NewTokens(st, nil)
	if err != nil {
		t.Fatal(err)
	}

	d.armed.Store(true)
	tok, err := tokens.Issue(ctx, "alice")
	if d.lost.Load() != 1 {
		t.Fatalf("%d replies lost, want 1", d.lost.Load())
	}
	if err != nil {
		t.Fatalf("Issue whose first reply was lost: %v", err)
	}
	if err := tokens.Consume(ctx, tok.Token, "alice"); err != nil {
		t.Fatalf("Consume of the issued token: %v", err)
	}

	// Another value under a stored id is still refused.
	if err := st.Put(ctx, "id", []byte("v1"), time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := st.Put(ctx, "id", []byte("v2"), time.Minute); err == nil {
		t.Fatal("Put of another value under a stored id succeeded")
	}
}
