-- forget: delete the key if it holds a cached result, or the lock of the token (Locker.Forget).
--
-- KEYS[1]  the key  <prefix>{<key>}
-- ARGV[1]  token whose lock may be deleted too ("" for none)
--
-- A lock value is "L" .. deadline (digits) .. ":" .. token: the first ':' ends the deadline. A value
-- starting with 'L' that is not of that form was not written by the Locker (damaged): no attempt
-- holds it, and it is deleted as a cached result is; so is a value of another type than a string (a
-- hash, a list), which the Locker never writes either.
-- Returns 1 when the key was deleted, 0 when it was absent or holds the lock of another token, which
-- stays (an attempt is running).
local v = redis.pcall('GET', KEYS[1])
if type(v) == 'table' then
  if string.sub(v.err, 1, 9) ~= 'WRONGTYPE' then
    return v -- any other error (a refused command) as it is
  end
  redis.call('DEL', KEYS[1])
  return 1
end
if not v then
  return 0
end
if string.sub(v, 1, 1) == 'L' then
  local i = string.find(v, ':', 2, true)
  if i and string.find(string.sub(v, 2, i - 1), '^%d+$') then
    if ARGV[1] == '' or string.sub(v, i + 1) ~= ARGV[1] then
      return 0
    end
  end
end
redis.call('DEL', KEYS[1])
return 1
