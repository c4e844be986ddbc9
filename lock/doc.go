// Package lock is the Redis [idemkit.Locker]: a short per-key lock that turns concurrent duplicates
// away and a cache of finished results, on go-redis v9.
//
//	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
//	guard, err := idemkit.New(store, &idemkit.Options{Locker: lock.New(rdb, nil)})
//
// # Round trips
//
// One Redis key per idempotency key holds either the lock of the attempt running it or the cached
// result of a finished one, so on Redis 7.0 and later the hot paths are single native commands:
// [Locker.Acquire] is SET key lock NX PX ttl GET (a free key is locked; a held one answers with the
// holder's deadline; a finished one answers with its cached result — a replay is this one command);
// [Locker.Release] with a result is SET key result PX ttl GET. Only the operations that must compare
// before they write are Lua scripts: [Locker.Refresh] (compare-and-set) and [Locker.Release] without a
// result (compare-and-delete). Scripts run with EVALSHA; when Redis lost its script cache (restart,
// failover, SCRIPT FLUSH) the first call of each falls back to EVAL, which costs one extra command and
// caches the script again.
//
// The native commands are pipelined automatically: while [Options.MaxInFlight] round trips (1 by
// default) are out, the commands of concurrent callers wait, and when one returns they leave
// together as one pipeline, sent by the first caller that waited. A lone caller never waits; under
// load many Acquires and Releases share one round trip, which saves system calls here and reads,
// writes and event-loop passes in Redis. On a Redis Cluster the round trips and the queue are per
// primary, so a node that is slow or down holds up only its own keys' commands. Each caller stays
// bounded by its own context: a command whose caller's context ends while it waits is withdrawn
// unsent, and a caller whose command is out in another caller's pipeline returns when its context
// ends (the command may still take effect, as an abandoned command may, and later than anything the
// caller does next: a [Locker.Release] without a result of the same key waits for it, so that the
// release of a lock such an Acquire took finds it). A pipeline runs until the latest deadline among
// its callers, so one caller's end never fails another's command; the caller that sends it waits
// for it, so on an unresponsive Redis that one caller may wait past its own deadline, up to that
// latest deadline.
//
// That wait ends when the pipeline returns, with its replies or without them. A command whose reply
// was lost to a timeout (its pipeline's deadline, its caller's deadline on a round trip of its own,
// a read timeout) may still wait in Redis's input buffer, and Redis orders commands per connection
// only: a Release sent next, on another connection, can run before it. Such an Acquire then locks
// the key after its release found nothing, and the lock stays until its time to live ends (a Guard's
// call whose deadline ended during its Acquire: its retries are answered in flight until LockTTL).
//
// A Redis older than 7.0 refuses SET with both NX and GET: the Locker notices it on its first Acquire
// (a syntax error) and runs Lua scripts doing the same from then on ([Locker.Scripts];
// [Options.Scripts] forces this mode).
//
// # Keys and safety
//
// A key K lives in the Redis key <prefix>{K} (see [Locker] for the escaping of an empty K, one
// starting with '%' or one holding '}', and for the value format). The hash tag {K} fixes the slot on Redis
// Cluster; [Client] is satisfied by *redis.Client, *redis.ClusterClient and redis.UniversalClient.
// Keys are only ever passed to the scripts as KEYS and tokens, results and times as ARGV: nothing a
// caller gives is spliced into Lua source, so no key or result can inject code.
//
// The lock is an efficiency device, not a guarantee: Redis may lose it (failover, restart, eviction)
// and the Guard's Store decides who runs. Results are cached under the same prefix; set a maxmemory
// policy that evicts volatile keys (volatile-lru, volatile-ttl) rather than refusing writes (with
// noeviction, a full Redis refuses every new lock with OOM; cached results are still replayed, at
// the cost of one more command: the native Acquire refused, then its script, which reads first). An evicted result
// is read from the Store again, except in Tx mode with the default CacheTTL, where the cache vouches
// for the keys it does not hold: the next duplicate of an evicted key runs its function, whose writes
// roll back (README, "Guarantees and their limits"). Size Redis for the results of CacheTTL, or set a
// CacheTTL shorter than TTL when it may evict.
//
// # Permissions
//
// A Redis user with ACLs needs, on the Locker's prefix (~idemkit:* by default), the commands
// +set +get +del +pttl +strlen +getrange +eval +evalsha: SET for the native commands, EVALSHA and EVAL
// for the scripts, and the others for what the scripts run (GETRANGE, STRLEN and PTTL only for
// [Locker.State]). Without scripting, Acquire and Release with a result still work, but Refresh,
// Release without a result (a failed call's) and script mode fail with NOPERM: a failed call's key
// then stays locked until its time to live ends.
//
// # Inspecting and repairing
//
// Operators' tools (package admin, the idemctl command) read and clean a key through the Locker, so
// the value format stays in this package: [Locker.Key] names the Redis key, [Locker.State] decodes
// what it holds (a lock with its token, deadline and time to live, or a cached result's size) in one
// atomic read, and [Locker.Forget] deletes a cached result or a given token's lock, never another
// attempt's. A Guard uses none of them.
//
// # Timeouts
//
// Create the client with ContextTimeoutEnabled: true. Without it go-redis does not let context
// deadlines bound socket reads and writes, and a call on an unresponsive Redis waits for the client's
// ReadTimeout/WriteTimeout (5s by default in go-redis v9.23) instead of the caller's deadline. Even
// with it, only a deadline bounds them: a context cancelled without one (an HTTP request whose client
// went away) does not end a command out on a Redis that stopped answering, which waits for the read
// timeout. The Guard releases locks on a context of its own, bounded by its FinishTimeout.
//
// # Errors
//
// Acquire reports a held lock as an [*idemkit.InFlightError] and Refresh and Release a lost lock as
// [idemkit.ErrLockNotHeld]. Every other failure (network, server, cancelled context) is returned
// wrapped with what was being done ("lock: acquiring: ...") and never matches those sentinels, so a
// Guard can tell "somebody holds the key" from "Redis is unavailable" (and fail open or closed). An
// Acquire whose context ended before its command was sent (withdrawn from the pipeline's queue)
// matches [idemkit.ErrNotSent] too: it took no lock, and there is nothing to release.
package lock
