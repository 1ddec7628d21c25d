-- Ask for a run's compensations: once requested, the run stays active until they are done.
-- KEYS: run, active runs
-- ARGV: run id
-- Returns 1 when this call made the request, 0 when it was made before or the run is gone.
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local state = redis.call('HGET', KEYS[1], 'compensation')
if state == 'requested' or state == 'done' then return 0 end
redis.call('HSET', KEYS[1], 'compensation', 'requested')
redis.call('SADD', KEYS[2], ARGV[1])
return 1
