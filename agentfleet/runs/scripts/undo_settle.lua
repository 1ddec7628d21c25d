-- Record how one compensation ended, counting it once for the run.
-- KEYS: run, the run's undo state (hash)
-- ARGV: entry, outcome ('done', or 'dead' once it was dead-lettered), ttl (s)
-- Returns 1 when this call recorded it.
local field = ARGV[2] == 'done' and 'compensated' or 'compensations_failed'
if redis.call('HSETNX', KEYS[2], ARGV[1], ARGV[2]) == 0 then return 0 end
redis.call('HINCRBY', KEYS[1], field, '1')
redis.call('EXPIRE', KEYS[2], ARGV[3])
return 1
