-- acquire (Redis before 7.0, which refuses SET with NX and GET): what SET key lock NX PX ttl GET does.
--
-- KEYS[1]  the key  <prefix>{<key>}
-- ARGV[1]  lock value: "L" .. deadline (Unix ms) .. ":" .. token
-- ARGV[2]  lock time to live, in milliseconds
--
-- Returns the key's value (a lock or a cached result) when it exists, changing nothing; otherwise sets
-- the lock and returns nil.
local v = redis.call('GET', KEYS[1])
if v then
  return v
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return false
