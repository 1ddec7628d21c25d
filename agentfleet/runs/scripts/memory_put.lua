-- Write one field of an item's memory, unless another delivery holds the item's claim.
-- KEYS: memory hash, claim
-- ARGV: field, JSON value, once (1: keep a value already there), claim token ('' = unfenced),
--       ttl (s)
-- Returns {1, the value now stored} or {0, ''} when another delivery holds the claim.
local holder = redis.call('GET', KEYS[2])
if ARGV[4] ~= '' and holder and holder ~= ARGV[4] then return {0, ''} end
if ARGV[3] == '1' then
  if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 0 then
    return {1, redis.call('HGET', KEYS[1], ARGV[1])}
  end
else
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
end
redis.call('EXPIRE', KEYS[1], ARGV[5])
return {1, ARGV[2]}
