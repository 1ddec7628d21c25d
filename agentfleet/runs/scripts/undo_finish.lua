-- Every compensation of a run ended: it is done compensating, and no longer active unless its
-- aggregate is still to come.
-- KEYS: run, active runs
-- ARGV: run id
redis.call('HSET', KEYS[1], 'compensation', 'done')
local aggregate = redis.call('HGET', KEYS[1], 'aggregate') or ''
if aggregate == '' or redis.call('HEXISTS', KEYS[1], 'aggregate_result') == 1 then
  redis.call('SREM', KEYS[2], ARGV[1])
end
return 1
