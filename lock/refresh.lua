-- refresh: extend a lock if the token still holds it (compare-and-set).
--
-- KEYS[1]  the key  <prefix>{<key>}
-- ARGV[1]  token of the attempt
-- ARGV[2]  the lock value with its new deadline
-- ARGV[3]  new time to live, in milliseconds
--
-- Returns 1 when the lock was extended, 0 when it is gone, held by another token, replaced by a
-- cached result or by a value of another type than a string (a hash, a list: no lock of any attempt).
local v = redis.pcall('GET', KEYS[1])
if type(v) == 'table' then
  if string.sub(v.err, 1, 9) == 'WRONGTYPE' then
    return 0
  end
  return v -- any other error (a refused command) as it is
end
if v and string.sub(v, 1, 1) == 'L' then
  local i = string.find(v, ':', 2, true)
  if i and string.sub(v, i + 1) == ARGV[1] then
    redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
    return 1
  end
end
return 0
