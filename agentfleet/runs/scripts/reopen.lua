-- Un-count an item's outcome and drop it, so a new delivery records a new one (requeue).
-- KEYS: run, done, outcome, events, inputs, active
-- ARGV: index, was ok (1/0), was dead-lettered (1/0), stage-0 input JSON or '', run id
local run, done, outkey, events, inputs, active = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local idx, was_ok, was_dead, input, run_id = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
redis.call('DEL', outkey)
if redis.call('HDEL', done, idx) == 0 then return 0 end
if input ~= '' then redis.call('HSET', inputs, idx, input) end
redis.call('SADD', active, run_id)
redis.call('XADD', events, '*', 'kind', 'reopen', 'idx', idx)
redis.call('HINCRBY', run, 'done', -1)
if was_ok == '1' then redis.call('HINCRBY', run, 'succeeded', -1)
else redis.call('HINCRBY', run, 'failed', -1) end
if was_dead == '1' then redis.call('HINCRBY', run, 'dead_lettered', -1) end
redis.call('HINCRBY', run, 'redelivered', 1)
redis.call('HDEL', run, 'ended_at')
if redis.call('HGET', run, 'status') == 'finished' then redis.call('HSET', run, 'status', 'running') end
return 1
