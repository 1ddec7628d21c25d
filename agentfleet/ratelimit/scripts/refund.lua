-- Adjust token buckets after the real usage is known: a positive amount returns unused tokens
-- (never above capacity), a negative one charges tokens spent beyond the estimate.
--
-- KEYS: buckets
-- ARGV: per bucket (rate per second, capacity, amount)

local now = now_ms()
local states = redis.call('MGET', unpack(KEYS))
for i = 1, #KEYS do
  local at = 3 * (i - 1)
  local rate = tonumber(ARGV[at + 1]) / 1000
  local capacity, amount = tonumber(ARGV[at + 2]), tonumber(ARGV[at + 3])
  local level = bucket_level(states[i], rate, capacity, now)
  bucket_store(KEYS[i], math.min(capacity, level + amount), rate, capacity, now)
end
return #KEYS
