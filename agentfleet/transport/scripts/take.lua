-- Take up to ARGV[1] messages of one queue and record each as unacknowledged in the same step
-- (kombu's record: the delivery tag in the index scored by ARGV[2], and [message, exchange,
-- routing key] in the hash), so that no message is ever out of both the queue and the record.
-- KEYS: the queue's lists, highest priority first; then the unacked index and the unacked hash
-- ARGV: how many at most, now (epoch seconds)
-- Returns the messages taken, oldest first. An entry without a delivery tag and delivery info
-- (exchange and routing key) cannot be recorded, nor one holding control characters (cjson
-- reads them, Python's JSON does not, and kombu could not restore its record) or a tag that is
-- not printable ASCII (Python would read it otherwise, and never find its record): it is taken
-- all the same, not recorded, and returned wrapped in a list of its own ({raw}), for the worker
-- to deliver (recording it then) or take out as malformed.
local index, unacked = KEYS[#KEYS - 1], KEYS[#KEYS]
local want = tonumber(ARGV[1])
local taken = {}
for i = 1, #KEYS - 2 do
  while #taken < want do
    local raw = redis.call('RPOP', KEYS[i])
    if not raw then break end
    local ok, message = pcall(cjson.decode, raw)
    local props = ok and type(message) == 'table' and message['properties'] or nil
    local tag = type(props) == 'table' and props['delivery_tag'] or nil
    local info = type(props) == 'table' and props['delivery_info'] or nil
    local exchange = type(info) == 'table' and info['exchange'] or nil
    local routing_key = type(info) == 'table' and info['routing_key'] or nil
    if type(tag) ~= 'string' or tag == '' or string.find(tag, '[^\32-\126]')
      or type(exchange) ~= 'string' or type(routing_key) ~= 'string'
      or string.find(raw, '[%z\1-\31]') then
      taken[#taken + 1] = {raw}
    else
      local record = '[' .. raw .. ',' .. cjson.encode(exchange) .. ',' .. cjson.encode(routing_key) .. ']'
      redis.call('ZADD', index, ARGV[2], tag)
      redis.call('HSET', unacked, tag, record)
      taken[#taken + 1] = raw
    end
  end
end
return taken
