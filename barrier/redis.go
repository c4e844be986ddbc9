package barrier

import (
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idemkit"
)

// Defaults for [RedisOptions].
const (
	// DefaultRedisPrefix is the middle part of barrier keys: {tag}:dtm-barrier:...
	DefaultRedisPrefix = "dtm-barrier"
	// DefaultRedisTTL is how long barrier keys live: DTM's examples keep them 7 days.
	DefaultRedisTTL = 7 * 24 * time.Hour
)

//go:embed redis_barrier.lua
var redisBarrierLua string

// businessMarker is the line of redis_barrier.lua replaced by the business body.
const businessMarker = "--[[idemkit:business]]"

// Scripter is the part of a go-redis v9 client the Redis barrier uses. *redis.Client,
// *redis.ClusterClient, *redis.Ring and redis.UniversalClient implement it.
type Scripter = redis.Scripter

// RedisOptions configure a [Redis] barrier. The zero value works.
type RedisOptions struct {
	// Prefix is the part of barrier keys after the hash tag. Defaults to DefaultRedisPrefix.
	Prefix string
	// TTL is how long barrier keys live; keep it longer than a global transaction may take. Defaults to
	// DefaultRedisTTL.
	TTL time.Duration
}

// Redis is the branch barrier for business data held in Redis: one Lua script checks and sets the
// barrier keys and applies the business's change atomically. It is safe for concurrent use.
type Redis struct {
	c      Scripter
	prefix string
	ttlMS  string
}

// NewRedis returns a Redis barrier on c. It returns an error when c is nil, the TTL is negative or under
// a millisecond, or the prefix contains braces.
func NewRedis(c Scripter, opts *RedisOptions) (*Redis, error) {
	if c == nil {
		return nil, errors.New("barrier: nil redis client")
	}
	var o RedisOptions
	if opts != nil {
		o = *opts
	}
	o.Prefix = cmp.Or(o.Prefix, DefaultRedisPrefix)
	o.TTL = cmp.Or(o.TTL, DefaultRedisTTL)
	if o.TTL < time.Millisecond {
		return nil, fmt.Errorf("barrier: redis TTL %s under a millisecond", o.TTL)
	}
	if strings.ContainsAny(o.Prefix, "{}") {
		return nil, fmt.Errorf("barrier: redis prefix %q must not contain braces", o.Prefix)
	}
	return &Redis{c: c, prefix: o.Prefix, ttlMS: strconv.FormatInt(o.TTL.Milliseconds(), 10)}, nil
}

// Script is a business change for [Redis.Call]: a Lua body that runs as a function of KEYS and ARGV (the
// business's own keys and arguments, numbered from 1) after the barrier let the call through, in the
// same script as the barrier. Create it once with [NewScript] and reuse it; it is safe for concurrent use.
//
// The body ends with a return value, which Call hands back in [Result].Value (Lua numbers come back as
// integers, truncated: return strings for other numbers). To refuse the change, return an error reply
// before writing anything: redis.error_reply('FAILURE: insufficient balance') makes Call return an error
// matching ErrBusinessFailure (wrapped in idemkit.Permanent: DTM's 409); other error replies and Lua
// errors come back as plain errors. In every refusal the barrier keys are not set, so a redelivery runs
// the body again. Redis does not undo a script's writes when it stops with an error, so check before you
// write.
type Script struct {
	body string
	s    *redis.Script
}

// NewScript wraps a business Lua body with the barrier. Lua syntax errors surface at the first Call.
func NewScript(body string) *Script {
	return &Script{body: body, s: redis.NewScript(strings.Replace(redisBarrierLua, businessMarker, body, 1))}
}

// Body returns the business Lua body.
func (s *Script) Body() string { return s.body }

// RedisCall is one business change applied behind the barrier.
type RedisCall struct {
	// Script is the business change. Required.
	Script *Script
	// Keys are the business's keys (KEYS in the script). They must all carry the same hash tag ({...}),
	// or, when they have none, be a single key: the barrier keys take that tag, so the script touches one
	// slot and runs on Redis Cluster. Every op of one branch (try, confirm, cancel; action, compensate)
	// must use the same tag, or the compensation will not find its origin.
	Keys []string
	// Args are the business's arguments (ARGV in the script), as go-redis formats them.
	Args []any
	// HashTag overrides the tag taken from Keys (without braces). Needed when Keys is empty and the
	// default, the branch's gid, is not what you want. Keys must then carry this tag.
	HashTag string
}

// Result is the barrier's decision and the business's return value.
type Result struct {
	// Outcome is Proceed when the business ran; otherwise it did not run.
	Outcome Outcome
	// Value is what the business body returned (nil for nil or false), when it ran.
	Value any
}

// Call runs call.Script behind the barrier for b, atomically: the business runs only on the first
// delivery of b, and the barrier keys ({tag}:<prefix>:...) are set only when it succeeds.
//
// Call returns ErrInvalidBranch, ErrCrossSlot, an error matching ErrBusinessFailure (wrapped in
// idemkit.Permanent, with Outcome Proceed) for a "FAILURE..." error reply of the business, ErrDuplicate for a repeated msg op, or the Redis
// error, wrapped.
func (r *Redis) Call(ctx context.Context, b *Branch, call *RedisCall) (Result, error) {
	if err := b.Validate(); err != nil {
		return Result{}, err
	}
	if call == nil || call.Script == nil {
		return Result{}, errors.New("barrier: RedisCall without a Script")
	}
	tag, err := slotTag(call.Keys, call.HashTag, b.Gid)
	if err != nil {
		return Result{}, err
	}
	bid := b.nextBarrierID()
	origin := OriginOp(b.Op)
	current := r.key(tag, b, b.Op, bid)
	originKey := current
	if origin != "" {
		originKey = r.key(tag, b, origin, bid)
	}
	keys := make([]string, 0, 2+len(call.Keys))
	keys = append(keys, current, originKey)
	keys = append(keys, call.Keys...)
	args := make([]any, 0, 3+len(call.Args))
	args = append(args, b.Op, origin, r.ttlMS)
	args = append(args, call.Args...)

	v, err := call.Script.s.Run(ctx, r.c, keys, args...).Result()
	if err != nil {
		var rerr redis.Error
		if errors.As(err, &rerr) && strings.HasPrefix(rerr.Error(), "FAILURE") {
			// the barrier let the call through and the business refused it
			return Result{Outcome: Proceed}, idemkit.Permanent(fmt.Errorf("%w: %s", ErrBusinessFailure, rerr.Error()))
		}
		return Result{}, fmt.Errorf("barrier: redis script for %s: %w", b, err)
	}
	reply, ok := v.([]any)
	if !ok || len(reply) == 0 {
		return Result{}, fmt.Errorf("barrier: redis script for %s: unexpected reply %v", b, v)
	}
	switch reply[0] {
	case "proceed":
		res := Result{Outcome: Proceed}
		if len(reply) > 1 {
			res.Value = reply[1]
		}
		return res, nil
	case "duplicate":
		if b.Op == OpMsg {
			return Result{Outcome: Duplicate}, ErrDuplicate
		}
		return Result{Outcome: Duplicate}, nil
	case "hanging":
		return Result{Outcome: Hanging}, nil
	case "null":
		return Result{Outcome: NullCompensation}, nil
	}
	return Result{}, fmt.Errorf("barrier: redis script for %s: unexpected reply %v", b, v)
}

// key names the barrier key of one op; gid and branch_id are length-prefixed so no two branches share
// a key whatever characters they contain.
func (r *Redis) key(tag string, b *Branch, op, bid string) string {
	var sb strings.Builder
	sb.Grow(len(tag) + len(r.prefix) + len(b.Gid) + len(b.BranchID) + len(op) + 24)
	sb.WriteByte('{')
	sb.WriteString(tag)
	sb.WriteString("}:")
	sb.WriteString(r.prefix)
	sb.WriteByte(':')
	sb.WriteString(strconv.Itoa(len(b.Gid)))
	sb.WriteByte(':')
	sb.WriteString(b.Gid)
	sb.WriteByte(':')
	sb.WriteString(strconv.Itoa(len(b.BranchID)))
	sb.WriteByte(':')
	sb.WriteString(b.BranchID)
	sb.WriteByte(':')
	sb.WriteString(op)
	sb.WriteByte(':')
	sb.WriteString(bid)
	return sb.String()
}

// hashTag returns the part of key Redis Cluster hashes: the text between the first '{' and the next '}'
// when it is not empty, otherwise the whole key.
func hashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

// slotTag picks the tag of the barrier keys: explicit, else the keys' common tag, else the gid.
func slotTag(keys []string, explicit, gid string) (string, error) {
	tag := explicit
	for _, k := range keys {
		t := hashTag(k)
		if tag == "" {
			tag = t
		} else if t != tag {
			return "", fmt.Errorf("%w: key %q hashes on %q, not %q", ErrCrossSlot, k, t, tag)
		}
	}
	if tag == "" {
		tag = gid
	}
	if tag == "" || strings.ContainsAny(tag, "{}") {
		return "", fmt.Errorf("%w: cannot use %q as a hash tag; give the keys a {tag}", ErrCrossSlot, tag)
	}
	return tag, nil
}
