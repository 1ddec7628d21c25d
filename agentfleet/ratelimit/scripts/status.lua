-- Read a downstream's state without changing it.
--
-- KEYS: pause key, holders zset, bucket record, reclaimed-leases counter
-- ARGV: per bucket (rate per second, capacity)
-- Returns {now ms, paused-until ms or '', live holders, leases reclaimed, tokens per bucket...}
-- as strings.

local now = now_ms()
local paused_until = tonumber(redis.call('GET', KEYS[1]))
local pause = ''
if paused_until and paused_until > now then
  pause = tostring(paused_until)
end
local holders = redis.call('ZCOUNT', KEYS[2], '(' .. tostring(now), '+inf')
local reclaimed = redis.call('GET', KEYS[4]) or '0'
local out = {tostring(now), pause, tostring(holders), reclaimed}
local rates, capacities = {}, {}
for b = 1, #ARGV / 2 do
  rates[b], capacities[b] = tonumber(ARGV[2 * b - 1]) / 1000, tonumber(ARGV[2 * b])
end
for _, level in ipairs(bucket_levels(redis.call('GET', KEYS[3]), rates, capacities, now)) do
  out[#out + 1] = tostring(level)
end
return out
