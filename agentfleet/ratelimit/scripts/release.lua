-- Give back a lease on each semaphore; releasing twice is harmless. The hold time feeds a
-- moving average that sharpens the wait hint given to callers who find the semaphore full.
--
-- KEYS: n pairs (holders zset, hold-time key)
-- ARGV: lease id, held ms, idle ttl ms
-- Returns how many leases were held.

local lease, held, idle = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local released = 0
for i = 1, #KEYS, 2 do
  if redis.call('ZREM', KEYS[i], lease) == 1 then
    released = released + 1
    local old = tonumber(redis.call('GET', KEYS[i + 1]))
    local average = held
    if old then
      average = 0.8 * old + 0.2 * held
    end
    redis.call('SET', KEYS[i + 1], tostring(average), 'PX', idle)
  end
end
return released
