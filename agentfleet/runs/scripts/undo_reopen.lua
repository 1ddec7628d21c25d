-- Let a dead-lettered compensation run again (its dead letter was requeued).
-- KEYS: run, the run's undo state (hash), active runs
-- ARGV: entry, run id
-- Returns 1 when the entry had been dead-lettered.
if redis.call('HGET', KEYS[2], ARGV[1]) ~= 'dead' then return 0 end
redis.call('HDEL', KEYS[2], ARGV[1], ARGV[1] .. ':tries')
redis.call('HINCRBY', KEYS[1], 'compensations_failed', -1)
redis.call('HSET', KEYS[1], 'compensation', 'requested')
redis.call('SADD', KEYS[3], ARGV[2])
return 1
