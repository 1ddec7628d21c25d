-- Take up to ARGV[1] messages in the order kombu's BRPOP looks would take them, and record each
-- as unacknowledged in the same step (kombu's record: the delivery tag in the index scored by
-- ARGV[2], and [message, exchange, routing key] in the hash), so that no message is ever out of
-- both the queue and the record. The records go in one ZADD and one HSET per 100 messages.
-- Each message comes from the first non-empty list in BRPOP's key order: priority step first,
-- then the queues in the channel's cycle order; with ARGV[3] = 1 (kombu's round-robin cycle)
-- the queue taken from then moves to the end of that order. Taking stops before a message of a
-- queue consumed without acknowledgements (its flag 0): kombu's next BRPOP takes that one.
-- When one list alone holds messages and it is one of queue ARGV[4]'s (the queue the BRPOP
-- answered), the others are not looked at one by one.
-- KEYS: each queue's lists, highest priority step first, queue by queue in the order of the
--       flags; then the unacked index and the unacked hash
-- ARGV: how many at most, now (epoch seconds), 1 to rotate the queues, the likely queue's
--       position among the flags (0 for none), then per queue 1 when it is consumed with
--       acknowledgements, else 0
-- Returns {origins, messages}: the messages taken, oldest first, and for each the position of
-- its queue among the flags (1-based). An entry without a delivery tag and delivery info
-- (exchange and routing key) cannot be recorded, nor one holding control characters (cjson
-- reads them, Python's JSON does not, and kombu could not restore its record) or a tag that is
-- not printable ASCII (Python would read it otherwise, and never find its record): it is taken
-- all the same, not recorded, and returned wrapped in a list of its own ({raw}), for the worker
-- to deliver (recording it then) or take out as malformed.
local lists = #KEYS - 2
local index, unacked = KEYS[lists + 1], KEYS[lists + 2]
local want, rotate, likely = tonumber(ARGV[1]), ARGV[3] == '1', tonumber(ARGV[4])
local queues = #ARGV - 4
if queues < 1 or want < 1 then return {{}, {}} end
local steps = lists / queues
local holding = redis.call('EXISTS', unpack(KEYS, 1, lists))
if holding == 0 then return {{}, {}} end

-- Whether `raw` holds a control character (0-31): one plain search per character, each a
-- memchr, written out (a loop over a table of the characters costs more in Lua than the
-- searches). A pattern class (`%c`, `[%z\1-\31]`) tests the message byte by byte in Lua's
-- matcher, about eight times the cost for a message of a kilobyte.
local find = string.find
local function control_at(raw)
  return find(raw, '\0', 1, true) or find(raw, '\1', 1, true) or find(raw, '\2', 1, true) or
    find(raw, '\3', 1, true) or find(raw, '\4', 1, true) or find(raw, '\5', 1, true) or
    find(raw, '\6', 1, true) or find(raw, '\7', 1, true) or find(raw, '\8', 1, true) or
    find(raw, '\9', 1, true) or find(raw, '\10', 1, true) or find(raw, '\11', 1, true) or
    find(raw, '\12', 1, true) or find(raw, '\13', 1, true) or find(raw, '\14', 1, true) or
    find(raw, '\15', 1, true) or find(raw, '\16', 1, true) or find(raw, '\17', 1, true) or
    find(raw, '\18', 1, true) or find(raw, '\19', 1, true) or find(raw, '\20', 1, true) or
    find(raw, '\21', 1, true) or find(raw, '\22', 1, true) or find(raw, '\23', 1, true) or
    find(raw, '\24', 1, true) or find(raw, '\25', 1, true) or find(raw, '\26', 1, true) or
    find(raw, '\27', 1, true) or find(raw, '\28', 1, true) or find(raw, '\29', 1, true) or
    find(raw, '\30', 1, true) or find(raw, '\31', 1, true)
end

local origins, taken, scored, records, count = {}, {}, {}, {}, 0

local function record_all()
  if #records > 0 then
    redis.call('ZADD', index, unpack(scored))
    redis.call('HSET', unacked, unpack(records))
    scored, records = {}, {}
  end
end

-- The delivery tag, exchange and routing key of message `raw`; an error when it is not JSON or
-- they are not where kombu puts them (indexing what is not a table fails, or gives nil).
local function fields(raw)
  local props = cjson.decode(raw)['properties']
  local info = props['delivery_info']
  return props['delivery_tag'], info['exchange'], info['routing_key']
end

-- Keep message `raw` of queue `q` (its place among the flags): recorded when it can be.
local function keep(raw, q)
  local ok, tag, exchange, routing_key = pcall(fields, raw)
  count = count + 1
  if not ok or type(tag) ~= 'string' or type(exchange) ~= 'string' or type(routing_key) ~= 'string'
    or not find(tag, '^[\32-\126]+$') or control_at(raw) then
    taken[count] = {raw}
  else
    local n = #records
    scored[n + 1] = ARGV[2]
    scored[n + 2] = tag
    records[n + 1] = tag
    records[n + 2] = '[' .. raw .. ',' .. cjson.encode(exchange) .. ',' .. cjson.encode(routing_key) .. ']'
    if n + 2 >= 200 then record_all() end
    taken[count] = raw
  end
  origins[count] = q
end

-- One list holds messages and it is one of the likely queue's: every other list is empty, so
-- each message in BRPOP's order comes from that list (with or without the rotation).
if holding == 1 and likely >= 1 and ARGV[4 + likely] == '1' then
  for step = 1, steps do
    local key = KEYS[(likely - 1) * steps + step]
    local raw = redis.call('RPOP', key)
    if raw then
      while raw do
        keep(raw, likely)
        if count >= want then break end
        raw = redis.call('RPOP', key)
      end
      record_all()
      return {origins, taken}
    end
  end
end

-- The queues in the order the next BRPOP would name them; lists known to be empty; per step,
-- the lists not known to be; the first step that may hold a message.
local order, empty, left, first = {}, {}, {}, 1
for q = 1, queues do order[q] = q end
for step = 1, steps do left[step] = queues end

local function emptied(key)
  empty[key] = true
  local step = (key - 1) % steps + 1
  left[step] = left[step] - 1
end

-- The next message BRPOP would give: its key, the queue's place in `order` and the message;
-- nil when every list is empty or the next is a queue's without acknowledgements.
local function next_message()
  for step = first, steps do
    if left[step] > 0 then
      for at = 1, queues do
        local q = order[at]
        local key = (q - 1) * steps + step
        if not empty[key] then
          if ARGV[4 + q] ~= '1' then
            if redis.call('LLEN', KEYS[key]) > 0 then return nil end
          else
            local raw = redis.call('RPOP', KEYS[key])
            if raw then return key, at, raw end
          end
          emptied(key)
        end
      end
    end
    if left[step] == 0 and step == first then first = step + 1 end
  end
  return nil
end

-- Otherwise message by message across the lists.
while count < want do
  local key, at, raw = next_message()
  if not key then break end
  local q = order[at]
  keep(raw, q)
  if rotate then
    table.remove(order, at)
    order[#order + 1] = q
  end
end
record_all()
return {origins, taken}
