-- Give a half-open circuit's probe back without a verdict.
--
-- KEYS: circuit hash
-- Returns 1 when a probe was released, else 0.

if redis.call('HGET', KEYS[1], 'state') == 'half_open' then
  redis.call('HSET', KEYS[1], 'probe_until', '0')
  return 1
end
return 0
