-- Ask for a run's compensations: once requested, the run stays active until they are done.
-- KEYS: run, active runs, the run's undo order
-- ARGV: run id
-- Returns 1 when a compensation message must be sent; 0 when it was asked for before, the run
-- is gone, or the run has ended with nothing to undo (then it is done at once).
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local state = redis.call('HGET', KEYS[1], 'compensation')
if state == 'requested' or state == 'done' then return 0 end
local done = tonumber(redis.call('HGET', KEYS[1], 'done') or '0')
local total = tonumber(redis.call('HGET', KEYS[1], 'tasks_total') or '0')
if done >= total and redis.call('ZCARD', KEYS[3]) == 0 then
  redis.call('HSET', KEYS[1], 'compensation', 'done')
  return 0
end
redis.call('HSET', KEYS[1], 'compensation', 'requested')
redis.call('SADD', KEYS[2], ARGV[1])
return 1
