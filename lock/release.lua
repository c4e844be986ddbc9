-- release: cache a result (whoever holds the lock) and unlock if the token holds the lock
-- (compare-and-delete), in one round trip.
--
-- KEYS[1]  lock key    <prefix>{<key>}:lock
-- KEYS[2]  result key  <prefix>{<key>}:result
-- ARGV[1]  token of the attempt
-- ARGV[2]  result to cache (optional)
-- ARGV[3]  cache time to live, in milliseconds (with ARGV[2])
--
-- Returns 1 when the token held the lock and it was deleted, 0 otherwise.
if #ARGV >= 3 then
  redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
