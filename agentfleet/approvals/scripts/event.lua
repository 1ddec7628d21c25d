-- An event came: every pending wait on its key is decided (approved, with the event's data).
-- A wait already past its timeout is decided by the timeout instead.
--
-- KEYS: <root>:all (routing)
-- ARGV: root, event key, data (JSON text), by (JSON text)
-- Returns how many waits the event completed.

local root, key = ARGV[1], ARGV[2]
local waits = root .. ':ev:' .. key
local now = now_s()
local n = 0
for _, id in ipairs(redis.call('SMEMBERS', waits)) do
  if redis.call('HGET', root .. ':a:' .. id, 'status') == 'pending' then
    if expired(root, id, now) then
      time_out(root, id, now)
    else
      settle(root, id, 'approved', '1', ARGV[4], 'null', ARGV[3], '0', now)
      n = n + 1
    end
  end
end
redis.call('DEL', waits)
return n
