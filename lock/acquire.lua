-- acquire: return the cached result for a key, or lock the key, in one round trip.
--
-- KEYS[1]  lock key    <prefix>{<key>}:lock
-- KEYS[2]  result key  <prefix>{<key>}:result
-- ARGV[1]  token of the attempt
-- ARGV[2]  lock time to live, in milliseconds
--
-- Returns the cached result (a string) when there is one, taking no lock; -1 when the lock was
-- taken, or is already held by this token (a retried command whose reply was lost: its ttl is
-- reset); otherwise the lock's remaining time to live in milliseconds (0 or more).
local cached = redis.call('GET', KEYS[2])
if cached then
  return cached
end
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return -1
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return -1
end
local ttl = redis.call('PTTL', KEYS[1])
if ttl < 0 then
  return 0
end
return ttl
