-- Count a call's result; a failure may open the circuit, a probe's success closes it.
--
-- KEYS: circuit hash, window hash, known downstreams (sorted set)
-- ARGV: 's' or 'f', window s, buckets per window, failure threshold, failure ratio,
--       cool-down s, downstream name
-- Returns {state after it, failures in the window, successes in the window}.

local now = now_s()
local h, w, known = KEYS[1], KEYS[2], KEYS[3]
local kind, window, nb = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local threshold, ratio, cooldown, name = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7]
local current = math.floor(now / (window / nb))
local state = redis.call('HGET', h, 'state') or 'closed'
if kind == 's' then
  if state == 'half_open' then
    redis.call('DEL', h, w)
    redis.call('ZADD', known, now, name)
    return {'closed', 0, 0}
  end
  -- A success reported while open came from a call started before the circuit opened.
  if state ~= 'closed' then return {state, 0, 0} end
  if redis.call('HINCRBY', w, 's:' .. current, '1') == 1 then
    window_sums(w, current, nb)
    redis.call('EXPIRE', w, math.ceil(window * 2))
  end
  return {'closed', 0, 0}
end
redis.call('HINCRBY', w, 'f:' .. current, '1')
redis.call('EXPIRE', w, math.ceil(window * 2))
redis.call('ZADD', known, now, name)
local fails, oks, started = window_sums(w, current, nb)
local attempts = math.max(fails + oks, started)
if state == 'half_open' or (state == 'closed' and fails >= threshold and fails >= ratio * attempts) then
  redis.call('HSET', h, 'state', 'open', 'opened_at', tostring(now),
    'open_until', tostring(now + cooldown), 'probe_until', '0')
  return {'open', fails, oks}
end
return {state, fails, oks}
