-- A person's (or a system's) decision on one pause: the first decision stands.
--
-- KEYS: <root>:all (routing)
-- ARGV: root, id, approved ('1' or '0'), by, comment, data (each JSON text)
-- Returns 'ok', 'missing', 'decided' (decided before: that stands) or 'expired' (its timeout
-- had passed: the timeout decides now, as on_timeout says, and that stands).

local root, id = ARGV[1], ARGV[2]
local status = redis.call('HGET', root .. ':a:' .. id, 'status')
if not status then return 'missing' end
if status ~= 'pending' then return 'decided' end
local now = now_s()
if expired(root, id, now) then
  time_out(root, id, now)
  return 'expired'
end
local verdict = (ARGV[3] == '1') and 'approved' or 'rejected'
settle(root, id, verdict, ARGV[3], ARGV[4], ARGV[5], ARGV[6], '0', now)
return 'ok'
