-- The run half of finish.lua: count the outcome that stands once for its run, and note it on
-- the run's timeline.
-- KEYS: run, done, events, inputs, spans, lanes, the run's bitmap of counted items
-- ARGV: index, outcome JSON, kind, dead-lettered (1/0), cost, seconds, ttl, worker node ('' for
--       none), the attempt's ms, the worker's lane in this run when known ('' when not)
-- Returns {recorded, done, total, run ended, aggregate path or '', stays active, the worker's
-- lane ('' when no entry was written)}.
return {record_outcome(KEYS[1], KEYS[2], KEYS[7], KEYS[3], KEYS[4], KEYS[5], KEYS[6], ARGV[1], ARGV[2],
  ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9], ARGV[10])}
