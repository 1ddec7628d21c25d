-- Extend a held lease on each semaphore. A lease that is gone (expired and swept) is not
-- brought back, since its slot may already be someone else's; one that ran out but that no
-- acquire has taken back yet is still the holder's.
--
-- KEYS: holders zsets
-- ARGV: lease id, lease ttl ms, idle ttl ms (how long the set outlives its longest lease)
-- Returns how many leases were extended.

local lease, ttl, keep = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local now = now_ms()
local renewed = 0
for i = 1, #KEYS do
  if redis.call('ZSCORE', KEYS[i], lease) then
    redis.call('ZADD', KEYS[i], now + ttl, lease)
    sem_expire(KEYS[i], keep)
    renewed = renewed + 1
  end
end
return renewed
