-- refresh: extend a lock if the token still holds it (compare-and-pexpire).
--
-- KEYS[1]  lock key    <prefix>{<key>}:lock
-- ARGV[1]  token of the attempt
-- ARGV[2]  new time to live, in milliseconds
--
-- Returns 1 when the lock was extended, 0 when it is gone or held by another token.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
