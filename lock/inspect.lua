-- inspect: what the key holds, for an operator (Locker.State). Reads only.
--
-- KEYS[1]  the key  <prefix>{<key>}
--
-- Returns {pttl} when the key is absent (pttl = -2); {pttl, value} when it holds a lock (a value
-- starting with 'L': small, returned whole); otherwise {pttl, first byte, length}: a cached result,
-- of which only the escape marker and the size are sent, however large it is. pttl is -1 for a key
-- without expiry. The three reads are one snapshot: nothing runs between them.
local t = redis.call('PTTL', KEYS[1])
if t == -2 then
  return {t}
end
local head = redis.call('GETRANGE', KEYS[1], 0, 0)
if head == 'L' then
  return {t, redis.call('GET', KEYS[1])}
end
return {t, head, redis.call('STRLEN', KEYS[1])}
