-- Every compensation of a run ended: it is done compensating. Returns 1 when it is no longer
-- active (its aggregate is not still to come): the caller drops it from the active set.
-- KEYS: run
redis.call('HSET', KEYS[1], 'compensation', 'done')
local aggregate = redis.call('HGET', KEYS[1], 'aggregate') or ''
if aggregate == '' or redis.call('HEXISTS', KEYS[1], 'aggregate_result') == 1 then return 1 end
return 0
