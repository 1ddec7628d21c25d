-- Start a delivery: read the run's status and any stored outcome; claim the item; count it.
-- KEYS: run hash, outcome, deliveries counter, claim
-- ARGV: deliveries ttl (s), claim token, claim ttl (ms)
-- Returns {status, stored outcome or '', deliveries, verdict, claim ms left}; verdict is
-- 'stored' (return the outcome), 'cancelled' (the run will not run it), 'busy' (another
-- delivery holds a live claim) or 'claimed' (this delivery runs the body).
local status = redis.call('HGET', KEYS[1], 'status') or ''
local stored = redis.call('GET', KEYS[2])
if stored then return {status, stored, 0, 'stored', 0} end
if status == 'cancelled' or status == 'failed' then return {status, '', 0, 'cancelled', 0} end
-- A claim this token already holds (a batch claims its items up front) is this delivery's.
local holder = redis.call('GET', KEYS[4])
if holder and holder ~= ARGV[2] then
  return {status, '', 0, 'busy', redis.call('PTTL', KEYS[4])}
end
redis.call('SET', KEYS[4], ARGV[2], 'PX', ARGV[3])
local n = redis.call('INCR', KEYS[3])
redis.call('EXPIRE', KEYS[3], ARGV[1])
return {status, '', n, 'claimed', 0}
