// Package redistoken is a Redis-backed [httpx.TokenStore] for one-time idempotency tokens: Put is
// SET NX PX, Take is GETDEL (Redis 6.2 or later), so a token is consumed atomically by exactly one
// request across every process sharing the Redis. Only token hashes reach Redis.
//
// A Take whose reply is lost (a read timeout) and that the go-redis client retries finds the token
// already consumed by its first attempt: the request is refused (httpx.ErrTokenInvalid) and its
// client needs a new token. A token is never accepted twice, but a slow Redis can refuse one; keep
// the client's ReadTimeout well above Redis's latency, or set MaxRetries -1 to see the timeout itself.
// A Put retried that way finds the token its first attempt stored, and succeeds.
package redistoken

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/redis/go-redis/v9"
)

// DefaultPrefix is prepended to every key.
const DefaultPrefix = "idemkit:token:"

// Client is the part of a go-redis client the store uses; redis.UniversalClient satisfies it.
type Client interface {
	SetArgs(ctx context.Context, key string, value any, a redis.SetArgs) *redis.StatusCmd
	GetDel(ctx context.Context, key string) *redis.StringCmd
}

// Options configure a [Store]. The zero value works.
type Options struct {
	// Prefix is prepended to every key. Defaults to DefaultPrefix.
	Prefix string
}

// Store keeps tokens in Redis with their TTL. It is safe for concurrent use.
type Store struct {
	client Client
	prefix string
}

// New returns a Store on client configured by opts (nil for defaults). Configure the client with
// ContextTimeoutEnabled so request deadlines bound Redis I/O. It panics when client is nil.
func New(client Client, opts *Options) *Store {
	if client == nil {
		panic("redistoken: nil client")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	return &Store{client: client, prefix: cmp.Or(o.Prefix, DefaultPrefix)}
}

// errExists: Put found the id taken by another value; with 256-bit random tokens this means a bug,
// not bad luck.
var errExists = errors.New("redistoken: token id already stored")

// getter is the part of a go-redis client Put uses to tell its own token, stored by a SET whose reply
// was lost, from another value under the id. Every go-redis client has it; a [Client] without it gets
// errExists whenever the id is taken.
type getter interface {
	Get(ctx context.Context, key string) *redis.StringCmd
}

// Put implements [httpx.TokenStore]: SET key value NX PX ttl. It returns errExists if the id holds
// another value, an error when ttl is not positive (Redis would keep the token forever), and Redis
// errors wrapped.
//
// A SET carried out whose reply was lost (a connection cut, a read timeout) is sent again by go-redis
// (Options.MaxRetries), and the second finds the id taken by the first: when the id holds value, the
// token is stored and Put succeeds (one GET more, on that path only).
func (s *Store) Put(ctx context.Context, id string, value []byte, ttl time.Duration) error {
	if ttl <= 0 {
		return fmt.Errorf("redistoken: storing token: time to live must be positive, got %s", ttl)
	}
	key := s.prefix + id
	ok, err := s.client.SetArgs(ctx, key, value, redis.SetArgs{Mode: "NX", TTL: ttl}).Result()
	switch {
	case errors.Is(err, redis.Nil) || err == nil && ok != "OK":
		return s.taken(ctx, key, value)
	case err != nil:
		return fmt.Errorf("redistoken: storing token: %w", err)
	}
	return nil
}

// taken answers a Put that found key taken: nil when key holds value (the Put's own SET, carried out
// although its reply was lost), errExists otherwise.
func (s *Store) taken(ctx context.Context, key string, value []byte) error {
	g, ok := s.client.(getter)
	if !ok {
		return errExists
	}
	v, err := g.Get(ctx, key).Bytes()
	switch {
	case err == nil && bytes.Equal(v, value):
		return nil
	case err != nil && !errors.Is(err, redis.Nil):
		return fmt.Errorf("redistoken: storing token: %w (reading the id found taken: %w)", errExists, err)
	}
	return errExists
}

// Take implements [httpx.TokenStore]: GETDEL key. It returns idemkit.ErrNotFound when the token is
// absent or expired and Redis errors wrapped.
func (s *Store) Take(ctx context.Context, id string) ([]byte, error) {
	v, err := s.client.GetDel(ctx, s.prefix+id).Bytes()
	switch {
	case errors.Is(err, redis.Nil):
		return nil, idemkit.ErrNotFound
	case err != nil:
		return nil, fmt.Errorf("redistoken: consuming token: %w", err)
	}
	return v, nil
}
