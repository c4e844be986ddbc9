-- idemkit DTM branch barrier for Redis, around a business Lua body.
-- KEYS[1]  barrier key of the current op
-- KEYS[2]  barrier key of the op it undoes (the same as KEYS[1] when there is none)
-- KEYS[3…] the business's keys, seen by the business as KEYS[1…]
-- ARGV[1]  value of a current key once the op is done (the op in the tagged layout, 'op' in dtmcli's)
-- ARGV[2]  origin op ('' when there is none)
-- ARGV[3]  barrier TTL in milliseconds
-- ARGV[4]  value of an origin key set by a null compensation (the compensating op; 'rollback' in dtmcli's)
-- ARGV[5…] the business's arguments, seen by the business as ARGV[1…]
-- Returns {'duplicate'}, {'hanging'}, {'null'}, {'proceed', <business result>} or the business's error reply.

-- The business first, so that it sees none of the barrier's locals: a body assigning one of their
-- names without 'local' would change what the barrier stores; it is Redis' undeclared-global error.
local business = function(KEYS, ARGV)
--[[idemkit:business]]
end

local done, origin, ttl, blocked = ARGV[1], ARGV[2], ARGV[3], ARGV[4]

local seen = redis.call('GET', KEYS[1])
if seen then
  if seen == done then
    return {'duplicate'}
  end
  return {'hanging'}
end

if origin ~= '' and redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('SET', KEYS[2], blocked, 'PX', ttl)
  redis.call('SET', KEYS[1], done, 'PX', ttl)
  return {'null'}
end

local bkeys, bargs = {}, {}
for i = 3, #KEYS do bkeys[#bkeys + 1] = KEYS[i] end
for i = 5, #ARGV do bargs[#bargs + 1] = ARGV[i] end

local result = business(bkeys, bargs)
if type(result) == 'table' and result.err then
  return result
end
redis.call('SET', KEYS[1], done, 'PX', ttl)
if result == nil then
  result = false
end
return {'proceed', result}
