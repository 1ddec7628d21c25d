-- A run was cancelled: its pending pauses end cancelled, and their items are sent again (to
-- end cancelled through the delivery, like every item of a cancelled run).
--
-- KEYS: <root>:all (routing)
-- ARGV: root, run id
-- Returns how many pauses were cancelled.

local root = ARGV[1]
local now = now_s()
local n = 0
for _, id in ipairs(redis.call('SMEMBERS', root .. ':run:' .. ARGV[2])) do
  if redis.call('HGET', root .. ':a:' .. id, 'status') == 'pending' then
    settle(root, id, 'cancelled', '0', 'null', 'null', 'null', '0', now)
    n = n + 1
  end
end
return n
