-- A decided pause's item was sent again: out of the outbox and of its run's parked items (unless
-- the item parked again meanwhile, at a later pause), its record kept ARGV[3] seconds more.
--
-- KEYS: <root>:all (routing)
-- ARGV: root, id, seconds to keep the record

local root, id = ARGV[1], ARGV[2]
local rec = root .. ':a:' .. id
redis.call('ZREM', root .. ':outbox', id)
local f = redis.call('HMGET', rec, 'run', 'idx')
if f[1] and f[2] then
  local parked = root .. ':parked:' .. f[1]
  if redis.call('HGET', parked, f[2]) == id then redis.call('HDEL', parked, f[2]) end
end
redis.call('EXPIRE', rec, tonumber(ARGV[3]))
return 1
