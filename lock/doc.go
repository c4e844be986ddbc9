// Package lock is the Redis [idemkit.Locker]: a short per-key lock that turns concurrent duplicates
// away and a cache of finished results, on go-redis v9.
//
//	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
//	guard, err := idemkit.New(store, &idemkit.Options{Locker: lock.New(rdb, nil)})
//
// # Round trips
//
// Every operation is one Lua script and one round trip: [Locker.Acquire] returns a cached result or
// takes the lock (SET NX PX) or reports the holder's remaining time; [Locker.Refresh] extends the lock
// if the token still holds it; [Locker.Release] fills the cache and deletes the lock if the token
// holds it. Scripts run with EVALSHA; when Redis lost its script cache (restart, failover,
// SCRIPT FLUSH) the first call of each script falls back to EVAL, which costs one extra command and
// caches the script again.
//
// # Keys and safety
//
// A key K lives in two Redis keys, <prefix>{K}:lock and <prefix>{K}:result (see [Locker] for the
// escaping of an empty K or one starting with '}' or '%'). The hash tag {K} puts both in one Redis
// Cluster slot, so the scripts work on a cluster as well as on a single node; [Scripter] is satisfied
// by *redis.Client, *redis.ClusterClient and redis.UniversalClient. Keys are only ever passed to
// the scripts as KEYS and tokens, results and times as ARGV: nothing a caller gives is spliced into
// Lua source, so no key or result can inject code.
//
// The lock is an efficiency device, not a guarantee: Redis may lose it (failover, restart, eviction)
// and the Guard's Store decides who runs. Results are cached under the same prefix; set a maxmemory
// policy that evicts volatile keys (volatile-lru, volatile-ttl) rather than refusing writes.
//
// # Timeouts
//
// Create the client with ContextTimeoutEnabled: true. Without it go-redis does not let context
// deadlines bound socket reads and writes, and a call on an unresponsive Redis waits for the client's
// ReadTimeout/WriteTimeout (5s by default in go-redis v9.23) instead of the caller's deadline. The
// Guard releases locks on a context of its own, bounded by its FinishTimeout.
//
// # Errors
//
// Acquire reports a held lock as an [*idemkit.InFlightError] and Refresh and Release a lost lock as
// [idemkit.ErrLockNotHeld]. Every other failure (network, server, cancelled context) is returned
// wrapped with what was being done ("lock: acquiring: ...") and never matches those sentinels, so a
// Guard can tell "somebody holds the key" from "Redis is unavailable" (and fail open or closed).
package lock
