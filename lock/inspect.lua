-- inspect: what the key holds, for an operator (Locker.State). Reads only.
--
-- KEYS[1]  the key  <prefix>{<key>}
--
-- Returns {pttl} when the key is absent (pttl = -2); {pttl, '', -1} when it holds a value of
-- another type than a string (a hash, a list: never the Locker's); {pttl, value} when it holds a
-- lock (a value starting with 'L': small, returned whole); otherwise {pttl, first byte, length}: a
-- cached result, of which only the escape marker and the size are sent, however large it is. pttl is
-- -1 for a key without expiry. The reads are one snapshot: nothing runs between them.
local t = redis.call('PTTL', KEYS[1])
if t == -2 then
  return {t}
end
local head = redis.pcall('GETRANGE', KEYS[1], 0, 0)
if type(head) == 'table' then
  if string.sub(head.err, 1, 9) == 'WRONGTYPE' then
    return {t, '', -1}
  end
  return head -- any other error (a refused command) as it is
end
if head == 'L' then
  return {t, redis.call('GET', KEYS[1])}
end
return {t, head, redis.call('STRLEN', KEYS[1])}
