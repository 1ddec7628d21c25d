-- Count an attempt that did not end its item (a failed attempt retried, a deferral) once per
-- event, as count_event.lua counts, and note it on the run's timeline.
-- KEYS: run, the run's counted events (hash), spans, lanes
-- ARGV: counter, event id, ttl (s), index, worker node, the attempt's ms, kind (r or d), the
--       worker's lane in this run when known ('' when not)
-- Returns {1, the worker's lane} when counted, {0, ''} for an event counted before.
if redis.call('HSETNX', KEYS[2], ARGV[1] .. ' ' .. ARGV[2], '1') == 0 then return {0, ''} end
redis.call('EXPIRE', KEYS[2], ARGV[3])
redis.call('HINCRBY', KEYS[1], ARGV[1], '1')
local lane = add_span(KEYS[3], KEYS[4], ARGV[4], ARGV[5], now_ms_text(), ARGV[6], ARGV[7], '', ARGV[3],
  ARGV[8])
return {1, lane}
