-- Let a dead-lettered compensation run again (its dead letter was requeued).
-- (the caller marks the run active first: that set is fleet-wide, apart from the run's keys).
-- KEYS: run, the run's undo state (hash)
-- ARGV: entry
-- Returns 1 when the entry had been dead-lettered.
if redis.call('HGET', KEYS[2], ARGV[1]) ~= 'dead' then return 0 end
redis.call('HDEL', KEYS[2], ARGV[1], ARGV[1] .. ':tries')
redis.call('HINCRBY', KEYS[1], 'compensations_failed', '-1')
redis.call('HSET', KEYS[1], 'compensation', 'requested')
return 1
