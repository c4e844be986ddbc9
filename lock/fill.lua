-- fill (Redis before 6.2, which refuses SET with GET): what SET key result PX ttl GET does.
--
-- KEYS[1]  the key  <prefix>{<key>}
-- ARGV[1]  cached result (stored form)
-- ARGV[2]  cache time to live, in milliseconds
--
-- Returns the key's previous value, or nil.
local v = redis.call('GET', KEYS[1])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return v
