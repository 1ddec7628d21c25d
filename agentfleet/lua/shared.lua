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

-- Item ``idx`` (text) as its bit in a run's bitmap of counted items: ``idx`` itself when it is a
-- whole number as Python writes one (no sign, no leading zero) below 2^32, else nil. The text
-- goes to Redis as it is (a Lua number is formatted with sprintf on its way).
local function item_bit(idx)
  if (idx == '0' or string.find(idx, '^[1-9]%d*$')) and #idx <= 10 and tonumber(idx) < 4294967296 then
    return idx
  end
  return nil
end
