-- Note a succeeded item (or stage, or graph step) whose task has a compensation.
-- KEYS: the run's undo order (sorted set), the run's undo data (hash)
-- ARGV: entry (its idempotency key), entry JSON, ttl (s)
-- The first note of an entry wins; its score is Redis server time, so newest is last.
if redis.call('HSETNX', KEYS[2], ARGV[1], ARGV[2]) == 1 then
  redis.call('ZADD', KEYS[1], now_s(), ARGV[1])
end
redis.call('EXPIRE', KEYS[1], ARGV[3])
redis.call('EXPIRE', KEYS[2], ARGV[3])
return 1
