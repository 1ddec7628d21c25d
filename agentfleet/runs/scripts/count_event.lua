-- Add to a run counter once per event: the same event again (a call sent again after a dropped
-- connection, or a redelivered message counting what its first copy counted) changes nothing.
-- KEYS: run, the run's counted events (hash)
-- ARGV: counter, amount, event id, ttl (s)
-- Returns 1 when counted, 0 for an event counted before.
if redis.call('HSETNX', KEYS[2], ARGV[1] .. ' ' .. ARGV[3], '1') == 0 then return 0 end
redis.call('EXPIRE', KEYS[2], ARGV[4])
redis.call('HINCRBY', KEYS[1], ARGV[1], ARGV[2])
return 1
