-- Count a failed credential check from one client; past the free ones, lock the client out,
-- each lockout twice as long as the one before, up to the longest.
-- KEYS: the client's failure hash (fields n, until)
-- ARGV: free failures, first lockout (ms), longest lockout (ms), forget after (ms)
-- Returns: {failures so far, lockout it now serves in ms (0 for none)}
-- Run twice (a retried call), it counts twice: the error is on the side of locking.
local n = redis.call('HINCRBY', KEYS[1], 'n', '1')
local free = tonumber(ARGV[1])
local lock = 0
if n > free then
  lock = math.floor(math.min(tonumber(ARGV[3]), tonumber(ARGV[2]) * 2 ^ (n - free - 1)))
  redis.call('HSET', KEYS[1], 'until', tostring(math.floor(now_ms() + lock)))
end
redis.call('PEXPIRE', KEYS[1], math.floor(math.max(tonumber(ARGV[4]), lock)))
return {n, lock}
