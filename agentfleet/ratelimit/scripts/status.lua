-- Read a downstream's state without changing it.
--
-- KEYS: pause key, holders zset, buckets
-- ARGV: per bucket (rate per second, capacity)
-- Returns {now ms, paused-until ms or '', live holders, tokens per bucket...} as strings.

local now = now_ms()
local paused_until = tonumber(redis.call('GET', KEYS[1]))
local pause = ''
if paused_until and paused_until > now then
  pause = tostring(paused_until)
end
local holders = redis.call('ZCOUNT', KEYS[2], '(' .. tostring(now), '+inf')
local out = {tostring(now), pause, tostring(holders)}
for i = 3, #KEYS do
  local at = 2 * (i - 3)
  local rate = tonumber(ARGV[at + 1]) / 1000
  local state = redis.call('GET', KEYS[i])
  out[#out + 1] = tostring(bucket_level(state, rate, tonumber(ARGV[at + 2]), now))
end
return out
