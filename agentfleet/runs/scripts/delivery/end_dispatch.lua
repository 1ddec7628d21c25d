-- Every item of a run is recorded and sent: its total is known. Ends the run at once when every
-- item already has its outcome (the last outcome came while the run was still dispatching).
-- A record closed already (this call sent again) is left as it is.
-- KEYS: run, events
-- ARGV: total items, now
-- Returns {1, done, total, 1, aggregate, stays active} when it ended the run, else {0, done,
-- total, 0, '', 0}; {0, 0, 0, 0, '', 0} when the run is gone.
if redis.call('EXISTS', KEYS[1]) == 0 then return {0, 0, 0, 0, '', 0} end
local n = tonumber(redis.call('HGET', KEYS[1], 'done') or '0')
if redis.call('HDEL', KEYS[1], 'dispatching') == 0 then
  return {0, n, tonumber(redis.call('HGET', KEYS[1], 'tasks_total') or '0'), 0, '', 0}
end
local total = tonumber(ARGV[1])
redis.call('HSET', KEYS[1], 'tasks_total', total)
redis.call('HDEL', KEYS[1], 'sent')
if n >= total then return {end_run(KEYS[1], KEYS[2], n, total, ARGV[2])} end
return {0, n, total, 0, '', 0}
