-- Helpers of the approval scripts: end a pending pause, or let its timeout end it.
-- A pause's record is <root>:a:<id>; by, comment and data arrive (and are kept) as JSON text.

-- End pending pause `id` with `status`; its item goes to the outbox to be sent again.
local function settle(root, id, status, approved, by, comment, data, timed_out, now)
  local rec = root .. ':a:' .. id
  redis.call('HSET', rec, 'status', status, 'approved', approved, 'by', by, 'comment', comment,
    'data', data, 'timed_out', timed_out, 'decided_at', tostring(now))
  redis.call('ZREM', root .. ':pending', id)
  redis.call('ZREM', root .. ':due', id)
  local ev = redis.call('HGET', rec, 'ev')
  if ev and ev ~= '' then redis.call('SREM', root .. ':ev:' .. ev, id) end
  redis.call('ZADD', root .. ':outbox', now, id)
  redis.call('HINCRBY', root .. ':counts', status, '1')
end

-- The timeout decides pending pause `id`, as its `on_timeout` says.
local function time_out(root, id, now)
  local ot = redis.call('HGET', root .. ':a:' .. id, 'ot')
  local approved = (ot == 'approve') and '1' or '0'
  settle(root, id, 'timed_out', approved, 'null', 'null', 'null', '1', now)
end

-- Whether pending pause `id` is past its timeout at `now`.
local function expired(root, id, now)
  local exp = tonumber(redis.call('HGET', root .. ':a:' .. id, 'exp') or '')
  return exp ~= nil and exp <= now
end
