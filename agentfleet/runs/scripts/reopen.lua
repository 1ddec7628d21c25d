-- Un-count an item's outcome, so a new delivery records a new one (requeue). The caller drops
-- the stored outcome and marks the run active beside this script (those keys live elsewhere).
-- The run's timeline, when it has one, notes the reopening (its outcome entry no longer stands).
-- KEYS: run, done, events, inputs, spans, the run's bitmap of counted items
-- ARGV: index, was ok (1/0), was dead-lettered (1/0), stage-0 input JSON or ''
local run, done, events, inputs = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local idx, was_ok, was_dead, input = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
-- Counted in the bitmap, or in the hash (see first_count in delivery/parts.lua).
local counted, bit = 0, item_bit(idx)
if bit then counted = redis.call('SETBIT', KEYS[6], bit, '0') end
if redis.call('HDEL', done, idx) == 1 then counted = 1 end
if counted == 0 then return 0 end
if input ~= '' then redis.call('HSET', inputs, idx, input) end
local event = redis.call('XADD', events, '*', 'kind', 'reopen', 'idx', idx)
if redis.call('EXISTS', KEYS[5]) == 1 then redis.call('RPUSH', KEYS[5], idx .. ' -1 ' .. event .. ' 0 o') end
redis.call('HINCRBY', run, 'done', '-1')
if was_ok == '1' then redis.call('HINCRBY', run, 'succeeded', '-1')
else redis.call('HINCRBY', run, 'failed', '-1') end
if was_dead == '1' then redis.call('HINCRBY', run, 'dead_lettered', '-1') end
redis.call('HINCRBY', run, 'redelivered', '1')
redis.call('HDEL', run, 'ended_at')
if redis.call('HGET', run, 'status') == 'finished' then redis.call('HSET', run, 'status', 'running') end
return 1
