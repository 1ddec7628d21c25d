-- Pause a downstream for every worker: paused-until only ever moves later.
--
-- KEYS: pause key, registry
-- ARGV: pause ms, downstream name, idle ttl ms
-- Returns paused-until, milliseconds of server time (a string, to keep its fraction).

local now = now_ms()
local paused_until = now + tonumber(ARGV[1])
local existing = tonumber(redis.call('GET', KEYS[1]))
if existing and existing > paused_until then
  paused_until = existing
end
redis.call('SET', KEYS[1], tostring(paused_until))
redis.call('PEXPIREAT', KEYS[1], math.ceil(paused_until))
local idle = tonumber(ARGV[3])
redis.call('ZADD', KEYS[2], now, ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - idle)
redis.call('PEXPIRE', KEYS[2], idle)
return tostring(paused_until)
