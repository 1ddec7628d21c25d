-- Extend a held lease on each semaphore. A lease that is gone (expired and swept) is not
-- brought back, since its slot may already be someone else's.
--
-- KEYS: holders zsets
-- ARGV: lease id, lease ttl ms
-- Returns how many leases were extended.

local lease, ttl = ARGV[1], tonumber(ARGV[2])
local now = now_ms()
local renewed = 0
for i = 1, #KEYS do
  if redis.call('ZSCORE', KEYS[i], lease) then
    redis.call('ZADD', KEYS[i], now + ttl, lease)
    sem_expire(KEYS[i])
    renewed = renewed + 1
  end
end
return renewed
