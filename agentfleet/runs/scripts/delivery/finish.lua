-- Store an item's outcome (first write wins), release its claim, and count it once for its run;
-- nothing at all when another delivery holds the item's claim (see settle_item). A stage or step
-- that is not the item's last (record 0) notes its attempt on the run's timeline when this call
-- stored its outcome.
-- KEYS: run, done, events, outcome, deliveries, claim, inputs, the item's memory, spans, lanes,
--       the run's bitmap of counted items
-- ARGV: index, outcome JSON, kind, dead-lettered (1/0), cost, seconds, ttl, store (1/0),
--       record (1/0), claim token, worker node ('' for none), the attempt's ms, the worker's
--       lane in this run when known ('' when not)
-- Returns {recorded, done, total, run ended, aggregate path or '', stays active, the outcome
-- that stands when it is not this one ('' when it is), fenced (1/0), claim ms left, the
-- worker's lane ('' when no entry was written)}.
local body, left, wrote = settle_item(KEYS[4], KEYS[5], KEYS[6], KEYS[8], ARGV[2], ARGV[10], ARGV[8], ARGV[7])
if body == '' then return {0, 0, 0, 0, '', 0, '', 1, left, ''} end
local stood = ''
if body ~= ARGV[2] then stood = body end
if ARGV[9] ~= '1' then
  local lane = ''
  if wrote == 1 and ARGV[11] ~= '' then
    lane = add_span(KEYS[9], KEYS[10], ARGV[1], ARGV[11], now_ms_text(), ARGV[12], 'p', '', ARGV[7], ARGV[13])
  end
  return {0, 0, 0, 0, '', 0, stood, 0, 0, lane}
end
local recorded, done, total, ended, aggregate, active, lane = record_outcome(KEYS[1], KEYS[2], KEYS[11],
  KEYS[3], KEYS[7], KEYS[9], KEYS[10], ARGV[1], body, ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[11],
  ARGV[12], ARGV[13])
return {recorded, done, total, ended, aggregate, active, stood, 0, 0, lane}
