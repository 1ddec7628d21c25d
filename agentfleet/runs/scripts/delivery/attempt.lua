-- Count an attempt that did not end its item (a failed attempt retried, a deferral) once per
-- event, as count_event.lua counts, and note it on the run's timeline.
-- KEYS: run, the run's counted events (hash), spans, lanes
-- ARGV: counter, event id, ttl (s), index, worker node, the attempt's ms, kind (r or d)
-- Returns 1 when counted, 0 for an event counted before.
if redis.call('HSETNX', KEYS[2], ARGV[1] .. ' ' .. ARGV[2], 1) == 0 then return 0 end
redis.call('EXPIRE', KEYS[2], ARGV[3])
redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
add_span(KEYS[3], KEYS[4], ARGV[4], ARGV[5], now_ms_text(), ARGV[6], ARGV[7], '', ARGV[3])
return 1
