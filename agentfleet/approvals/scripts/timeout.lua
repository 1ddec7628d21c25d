-- Let the timeout decide every pending pause past it (at most ARGV[2] of them).
--
-- KEYS: <root>:all (routing)
-- ARGV: root, limit
-- Returns the ids decided.

local root = ARGV[1]
local now = now_s()
local due = redis.call('ZRANGEBYSCORE', root .. ':due', '-inf', now, 'LIMIT', '0', tonumber(ARGV[2]))
local done = {}
for _, id in ipairs(due) do
  if redis.call('HGET', root .. ':a:' .. id, 'status') == 'pending' then
    time_out(root, id, now)
    done[#done + 1] = id
  else
    redis.call('ZREM', root .. ':due', id)
  end
end
return done
