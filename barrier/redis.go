package barrier

import (
	"cmp"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
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

// RedisLayout is how the Redis barrier names its keys and what it stores in them.
type RedisLayout int

const (
	// LayoutTagged, the default, names a barrier key
	// {tag}:<Prefix>:<len(gid)>:<gid>:<len(branch_id)>:<branch_id>:<op>:<barrier_id>, where tag is the
	// hash tag of the business's keys: every key of a call is in one Redis Cluster slot, and no two
	// branches share a key whatever their ids contain. dtmcli cannot read these keys.
	LayoutTagged RedisLayout = iota
	// LayoutDTMCli uses the keys and values of dtmcli's Redis barrier (BranchBarrier.RedisCheckAdjustAmount
	// in github.com/dtm-labs/client v1.17): the key <gid>-<branch_id>-<op>-<barrier_id>, holding "op" once
	// the op is done and "rollback" when a null compensation blocks the op it undoes. A branch may then be
	// moved from dtmcli to idemkit (or back) one op at a time: a dtmcli try followed by an idemkit cancel
	// releases what the try reserved, and an idemkit null cancel blocks a late dtmcli try.
	//
	// Compatibility wins over the cluster: the keys carry no prefix and no hash tag of their own, as in
	// dtmcli (whose barrier takes a single-node client). On Redis Cluster a call works only when its gid
	// carries a hash tag ("{acct7}-...") that the business's keys share; otherwise Redis refuses it and
	// Call returns ErrCrossSlot. So it is on a redis.Ring, which runs the script on the shard of the
	// barrier key: there the barrier refuses the call itself, with ErrCrossSlot (also a compensating
	// op's whose gid carries no tag: the key of the op it undoes may be on another shard).
	// RedisOptions.Prefix and RedisCall.HashTag do not apply, and a branch_id or op containing '-' is
	// refused (ErrInvalidBranch), since dtmcli's key would not tell it from another branch's. Unlike
	// dtmcli's, the barrier also blocks a late action after a null rollback (workflow); dtmcli's Redis
	// barrier honours those keys too.
	LayoutDTMCli
)

// dtmcli's values of LayoutDTMCli keys.
const (
	dtmcliDone    = "op"
	dtmcliBlocked = "rollback"
)

// RedisOptions configure a [Redis] barrier. The zero value works.
type RedisOptions struct {
	// Layout names the barrier keys. Defaults to LayoutTagged; LayoutDTMCli shares the keys with
	// dtmcli's Redis barrier. Changing it on a live system loses the barrier state of the branches in
	// flight: move only between transactions, or keep both until the old keys expire.
	Layout RedisLayout
	// Prefix is the part of barrier keys after the hash tag (LayoutTagged only). Defaults to
	// DefaultRedisPrefix.
	Prefix string
	// TTL is how long barrier keys live; keep it longer than a global transaction may take. Defaults to
	// DefaultRedisTTL.
	//
	// The keys are the barrier's only memory: a key gone — past its TTL, or lost by Redis (a restart
	// without persistence, a failover that lost the last writes, an eviction) — makes a redelivered
	// op run again, a compensation skip its undo as a null compensation, and a late try or action run
	// after its compensation. Keep them on a Redis whose maxmemory-policy is noeviction: under the
	// volatile-* policies the barrier keys, which expire, are evicted before the business keys they
	// guard, which usually do not.
	TTL time.Duration
}

// Redis is the branch barrier for business data held in Redis: one Lua script checks and sets the
// barrier keys and applies the business's change atomically. It is safe for concurrent use.
type Redis struct {
	c      Scripter
	ring   bool // c is a *redis.Ring: it runs a script on the shard of its first key, the barrier key
	layout RedisLayout
	prefix string
	ttlMS  string
}

// NewRedis returns a Redis barrier on c. It returns an error when c is nil, the layout is unknown, the
// TTL is negative or under a millisecond, the prefix contains braces, or a prefix is given with
// LayoutDTMCli.
func NewRedis(c Scripter, opts *RedisOptions) (*Redis, error) {
	if c == nil {
		return nil, errors.New("barrier: nil redis client")
	}
	var o RedisOptions
	if opts != nil {
		o = *opts
	}
	switch o.Layout {
	case LayoutTagged:
		o.Prefix = cmp.Or(o.Prefix, DefaultRedisPrefix)
	case LayoutDTMCli:
		if o.Prefix != "" {
			return nil, fmt.Errorf("barrier: redis prefix %q: dtmcli's key layout has none", o.Prefix)
		}
	default:
		return nil, fmt.Errorf("barrier: unknown redis layout %d", o.Layout)
	}
	o.TTL = cmp.Or(o.TTL, DefaultRedisTTL)
	if o.TTL < time.Millisecond {
		return nil, fmt.Errorf("barrier: redis TTL %s under a millisecond", o.TTL)
	}
	if strings.ContainsAny(o.Prefix, "{}") {
		return nil, fmt.Errorf("barrier: redis prefix %q must not contain braces", o.Prefix)
	}
	_, ring := c.(*redis.Ring)
	return &Redis{c: c, ring: ring, layout: o.Layout, prefix: o.Prefix, ttlMS: strconv.FormatInt(o.TTL.Milliseconds(), 10)}, nil
}

// Script is a business change for [Redis.Call]: a Lua body that runs as a function of KEYS and ARGV (the
// business's own keys and arguments, numbered from 1) after the barrier let the call through, in the
// same script as the barrier. Create it once with [NewScript] and reuse it; it is safe for concurrent use.
// The body sees none of the barrier's variables: declare its own with local, as in any script (an
// assignment to an undeclared name is Redis' error, before anything is written).
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
	// default, the branch's gid (its own hash tag when it has one, "{acct7}-..." hashing on acct7; a
	// digest of it when its braces leave neither usable), is not what you want. Keys must then carry
	// this tag. LayoutTagged only.
	HashTag string
}

// adjustAmount is the business of dtmcli's RedisCheckAdjustAmount. It is never modified.
var adjustAmount = NewScript(`
local v = redis.call('GET', KEYS[1])
if v == false then return redis.error_reply('FAILURE: key ' .. KEYS[1] .. ' does not exist') end
if tonumber(v) + tonumber(ARGV[1]) < 0 then return redis.error_reply('FAILURE: ' .. KEYS[1] .. ' would go below zero') end
return redis.call('INCRBY', KEYS[1], ARGV[1])`)

// AdjustAmount returns the business of dtmcli's RedisCheckAdjustAmount: add amount to the integer at
// key, refused as a permanent failure (ErrBusinessFailure) when key does not exist or would go below
// zero; Result.Value is the new value. With [LayoutDTMCli] it replaces
// bb.RedisCheckAdjustAmount(rdb, key, amount, expire) op by op. Unlike dtmcli, which checks the amount
// before the barrier, the check runs only for a delivery the barrier lets through: a repeated or
// null-compensated delivery never fails because the value moved since.
func AdjustAmount(key string, amount int64) *RedisCall {
	return &RedisCall{Script: adjustAmount, Keys: []string{key}, Args: []any{amount}}
}

// Result is the barrier's decision and the business's return value.
type Result struct {
	// Outcome is Proceed when the business ran; otherwise it did not run.
	Outcome Outcome
	// Value is what the business body returned (nil for nil or false), when it ran.
	Value any
}

// Call runs call.Script behind the barrier for b, atomically: the business runs only on the first
// delivery of b, and the barrier keys are set only when it succeeds.
//
// Call returns ErrInvalidBranch (also, with LayoutDTMCli, for a branch_id or op containing '-'),
// ErrCrossSlot, an error matching ErrBusinessFailure (wrapped in idemkit.Permanent, with Outcome
// Proceed) for a "FAILURE..." error reply of the business, ErrDuplicate for a repeated msg op, or the
// Redis error, wrapped — marked idemkit.Retryable when the server answered that it cannot serve now
// (LOADING, READONLY, MASTERDOWN, NOREPLICAS, CLUSTERDOWN, TRYAGAIN, OOM, MISCONF, BUSY, max clients):
// an outage, not the business's answer. When it returns an error, b's barrier count is as it was (see
// [Gorm.TransactionOutcome]): a retry with the same b — after a lost reply, say, when the script may
// have run — uses the same barrier id and finds the keys the first attempt set.
func (r *Redis) Call(ctx context.Context, b *Branch, call *RedisCall) (res Result, err error) {
	if err := b.Validate(); err != nil {
		return Result{}, err
	}
	calls := b.calls
	defer func() {
		if err != nil {
			b.calls = calls
		}
	}()
	if call == nil || call.Script == nil {
		return Result{}, errors.New("barrier: RedisCall without a Script")
	}
	origin := OriginOp(b.Op)
	var current, originKey, done, blocked string
	switch r.layout {
	case LayoutDTMCli:
		if strings.Contains(b.BranchID, "-") || strings.Contains(b.Op, "-") {
			return Result{}, fmt.Errorf("%w: branch_id %q or op %q contains '-': dtmcli's Redis key "+
				"gid-branch_id-op-barrier_id would not tell this branch from another", ErrInvalidBranch, b.BranchID, b.Op)
		}
		if call.HashTag != "" {
			return Result{}, fmt.Errorf("%w: RedisCall.HashTag %q: dtmcli's key layout hashes on the gid", ErrCrossSlot, call.HashTag)
		}
		bid := b.nextBarrierID()
		current = b.Gid + "-" + b.BranchID + "-" + b.Op + "-" + bid
		originKey = current
		if origin != "" {
			originKey = b.Gid + "-" + b.BranchID + "-" + origin + "-" + bid
		}
		done, blocked = dtmcliDone, dtmcliBlocked
		if r.ring { // as Redis Cluster refuses it: the other keys may be on other shards
			tag := hashTag(current)
			for _, k := range append([]string{originKey}, call.Keys...) {
				if hashTag(k) != tag {
					return Result{}, fmt.Errorf("%w: key %q is not under the hash tag of the barrier key %q: a redis.Ring "+
						"runs the script on the barrier key's shard; give the gid the business keys' hash tag ({tag}-...)",
						ErrCrossSlot, k, current)
				}
			}
		}
	default:
		tag, err := slotTag(call.Keys, call.HashTag, b.Gid)
		if err != nil {
			return Result{}, err
		}
		bid := b.nextBarrierID()
		current = r.key(tag, b, b.Op, bid)
		originKey = current
		if origin != "" {
			originKey = r.key(tag, b, origin, bid)
		}
		done, blocked = b.Op, b.Op
	}
	keys := make([]string, 0, 2+len(call.Keys))
	keys = append(keys, current, originKey)
	keys = append(keys, call.Keys...)
	args := make([]any, 0, 4+len(call.Args))
	args = append(args, done, origin, r.ttlMS, blocked)
	args = append(args, call.Args...)

	v, err := call.Script.s.Run(ctx, r.c, keys, args...).Result()
	if err != nil {
		var rerr redis.Error
		switch {
		case errors.As(err, &rerr) && strings.HasPrefix(rerr.Error(), "FAILURE"):
			// the barrier let the call through and the business refused it
			return Result{Outcome: Proceed}, idemkit.Permanent(fmt.Errorf("%w: %s", ErrBusinessFailure, rerr.Error()))
		case errors.As(err, &rerr) && strings.HasPrefix(rerr.Error(), "CROSSSLOT"):
			return Result{}, fmt.Errorf("%w: redis script for %s: %w", ErrCrossSlot, b, err)
		case unavailable(err):
			// The server answered that it cannot serve the call now (a replica after a failover, a
			// restart loading its data): an outage, whatever a classifier says of error replies.
			return Result{}, idemkit.Retryable(fmt.Errorf("barrier: redis script for %s: %w", b, err))
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
	case "duplicate", "hanging":
		out := Duplicate
		if reply[0] == "hanging" {
			out = Hanging
		}
		if b.Op == OpMsg { // dtmcli: any existing key refuses DoAndSubmit, also one set by QueryPrepared
			return Result{Outcome: Duplicate}, ErrDuplicate
		}
		return Result{Outcome: out}, nil
	case "null":
		return Result{Outcome: NullCompensation}, nil
	}
	return Result{}, fmt.Errorf("barrier: redis script for %s: unexpected reply %v", b, v)
}

// unavailable reports whether err is an error reply by which the server says it cannot serve the call
// now — loading its data after a restart (LOADING), a replica refusing writes after a failover
// (READONLY), a master without its replicas or link (NOREPLICAS, MASTERDOWN), a cluster without its
// slots (CLUSTERDOWN, TRYAGAIN), out of memory (OOM), unable to persist (MISCONF), busy with another
// script (BUSY), or full (max clients) — rather than an answer to the call. A write of the script
// refused so comes back with the code first (Redis 7) or after the script's line ("ERR Error running
// script ...: @user_script:36: -OOM ...", Redis 6).
func unavailable(err error) bool {
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return false
	}
	msg := rerr.Error()
	if strings.HasPrefix(msg, "ERR max number of clients reached") {
		return true
	}
	for _, code := range unavailableCodes {
		if strings.HasPrefix(msg, code+" ") || strings.Contains(msg, ": -"+code+" ") {
			return true
		}
	}
	return false
}

// unavailableCodes are the error codes of [unavailable].
var unavailableCodes = []string{"LOADING", "READONLY", "NOREPLICAS", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "OOM", "MISCONF", "BUSY"}

// key names the barrier key of one op in LayoutTagged; gid and branch_id are length-prefixed so no
// two branches share a key whatever characters they contain.
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

// gidTag is the tag of a call with neither keys nor a HashTag: the gid's own hash tag when it has one
// ("{acct7}-..." hashes on acct7, as dtmcli's keys of that gid do), else the gid itself, or, for a gid
// whose braces leave neither usable, a digest of it.
func gidTag(gid string) string {
	if tag := hashTag(gid); !strings.ContainsAny(tag, "{}") {
		return tag
	}
	sum := sha256.Sum256([]byte(gid))
	return "gid#" + hex.EncodeToString(sum[:8])
}

// slotTag picks the tag of the barrier keys: explicit, else the keys' common tag, else the gid's
// (gidTag).
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
		tag = gidTag(gid)
	}
	if tag == "" || strings.ContainsAny(tag, "{}") {
		return "", fmt.Errorf("%w: cannot use %q as a hash tag; give the keys a {tag}", ErrCrossSlot, tag)
	}
	return tag, nil
}
