-- Store an item's outcome (first write wins), release its claim, and count it once for its run.
-- KEYS: run, done, events, outcome, deliveries, claim, inputs, the item's memory
-- ARGV: index, outcome JSON, kind, dead-lettered (1/0), cost, seconds, ttl, store (1/0),
--       record (1/0), now, claim token
-- Returns {recorded, done, total, run ended, aggregate path or '', stays active}.
local body = settle_item(KEYS[4], KEYS[5], KEYS[6], KEYS[8], ARGV[2], ARGV[11], ARGV[8], ARGV[7])
if ARGV[9] ~= '1' then return {0, 0, 0, 0, '', 0} end
return record_outcome(KEYS[1], KEYS[2], KEYS[3], KEYS[7], ARGV[1], body, ARGV[3], ARGV[4], ARGV[5],
  ARGV[6], ARGV[7], ARGV[10])
