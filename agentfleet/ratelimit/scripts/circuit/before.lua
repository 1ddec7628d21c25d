-- May a call go to this downstream? Counts the call as started when asked to.
--
-- KEYS: circuit hash, window hash
-- ARGV: probe ttl s, count the attempt ('1' or '0'), window s, buckets per window
-- Returns {'pass' | 'probe' | 'wait', seconds to wait}.

local now = now_s()
local h, w, probe_ttl = KEYS[1], KEYS[2], tonumber(ARGV[1])
local f = redis.call('HMGET', h, 'state', 'open_until', 'probe_until')
local state = f[1] or 'closed'
if state == 'closed' then
  if ARGV[2] == '1' then
    local window, nb = tonumber(ARGV[3]), tonumber(ARGV[4])
    if redis.call('HINCRBY', w, 'a:' .. math.floor(now / (window / nb)), '1') == 1 then
      redis.call('EXPIRE', w, math.ceil(window * 2))
    end
  end
  return {'pass', '0'}
end
if state == 'open' then
  local open_until = tonumber(f[2] or '0')
  if now < open_until then return {'wait', tostring(open_until - now)} end
  redis.call('HSET', h, 'state', 'half_open', 'probe_until', tostring(now + probe_ttl))
  return {'probe', '0'}
end
local probe_until = tonumber(f[3] or '0')
if now < probe_until then return {'wait', tostring(probe_until - now)} end
redis.call('HSET', h, 'probe_until', tostring(now + probe_ttl))
return {'probe', '0'}
