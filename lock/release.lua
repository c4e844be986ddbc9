-- release: delete the key if it holds the token's lock (compare-and-delete).
--
-- KEYS[1]  the key  <prefix>{<key>}
-- ARGV[1]  token of the attempt
--
-- A lock value is "L" .. deadline (digits) .. ":" .. token: the first ':' ends the deadline.
-- Returns 1 when the token held the lock and it was deleted, 0 otherwise (gone, another token's lock,
-- a cached result, which stays, or a value of another type than a string, which stays too: Forget
-- deletes it).
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
    redis.call('DEL', KEYS[1])
    return 1
  end
end
return 0
