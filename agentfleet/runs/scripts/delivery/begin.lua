-- Start a delivery: read the run's status and any stored outcome; claim the item; count it.
-- KEYS: run hash, outcome, deliveries counter, claim
-- ARGV: deliveries ttl (s), claim token, claim ttl (ms), 1 when the token claimed the item up front
--       (a batch's) else 0
-- Returns {status, stored outcome or '', deliveries, verdict, claim ms left}; verdict is
-- 'stored' (return the outcome), 'cancelled' (the run will not run it), 'busy' (another
-- delivery holds a live claim) or 'claimed' (this delivery runs the body).
local status = redis.call('HGET', KEYS[1], 'status') or ''
local cancelled = status == 'cancelled' or status == 'failed'
local stored, deliveries, verdict, left = claim_item(KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2], ARGV[3],
  cancelled, ARGV[4])
return {status, stored, deliveries, verdict, left}
