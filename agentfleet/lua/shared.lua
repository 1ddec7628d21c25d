-- Helpers every agentfleet script may use; the loader sends this file in front of each one.
-- Times come from Redis server time, so workers with skewed clocks agree.

-- Milliseconds since the epoch, with the microseconds as a fraction.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
end

-- Seconds since the epoch, with the microseconds as a fraction.
local function now_s()
  local t = redis.call('TIME')
  return tonumber(t[1]) + tonumber(t[2]) / 1000000
end
