-- Take up to ARGV[1] messages of one queue and record each as unacknowledged in the same step
-- (kombu's record: the delivery tag in the index scored by ARGV[2], and [message, exchange,
-- routing key] in the hash), so that no message is ever out of both the queue and the record.
-- KEYS: the queue's lists, highest priority first; then the unacked index and the unacked hash
-- ARGV: how many at most, now (epoch seconds)
-- Returns the messages taken, oldest first. A message without a delivery tag and delivery
-- info stays where it was (kombu's own reading handles it), and the taking stops there.
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
    if type(tag) ~= 'string' or type(info) ~= 'table' then
      redis.call('RPUSH', KEYS[i], raw)
      return taken
    end
    local record = '[' .. raw .. ',' .. cjson.encode(info['exchange'] or '') .. ','
      .. cjson.encode(info['routing_key'] or '') .. ']'
    redis.call('ZADD', index, ARGV[2], tag)
    redis.call('HSET', unacked, tag, record)
    taken[#taken + 1] = raw
  end
end
return taken
