-- Adjust token buckets after the real usage is known: a positive amount returns unused tokens
-- (never above capacity), a negative one charges tokens spent beyond the estimate.
--
-- KEYS: bucket records, one per downstream
-- ARGV: per record, the bucket count, then per bucket (rate per second, capacity, amount)

local now = now_ms()
local records = redis.call('MGET', unpack(KEYS))
local at = 1
for g = 1, #KEYS do
  local n = tonumber(ARGV[at])
  local rates, capacities, amounts = {}, {}, {}
  for b = 1, n do
    local i = at + 3 * (b - 1)
    rates[b] = tonumber(ARGV[i + 1]) / 1000
    capacities[b], amounts[b] = tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3])
  end
  at = at + 1 + 3 * n
  local levels = bucket_levels(records[g], rates, capacities, now)
  for b = 1, n do
    levels[b] = math.min(capacities[b], levels[b] + amounts[b])
  end
  buckets_store(KEYS[g], levels, rates, capacities, now)
end
return #KEYS
