-- Count one spending report of a delivery: for its item, its run, its tenant today, the fleet
-- today; raise each budget's alerts once.
-- KEYS: item memory, run, day, stats
-- ARGV: US dollars, tokens, turns, seconds, delivery token, report number (1, 2, ... per
--       delivery, sent in order), tenant ('' for none), run cap, tenant cap, fleet cap
--       (0 for none), alert share, memory ttl (s), day ttl (s)
-- Returns {item $usd, $tokens, $turns, $s, alerts}; an alert is {scope, name, level, spent, cap}.
local mem, run, day, stats = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token, seq, tenant = ARGV[5], tonumber(ARGV[6]), ARGV[7]
local share = tonumber(ARGV[11])
local function item()
  local t = redis.call('HMGET', mem, '$usd', '$tokens', '$turns', '$s')
  return {t[1] or '0', t[2] or '0', t[3] or '0', t[4] or '0'}
end
local seqfield = '$seq:' .. token
if tonumber(redis.call('HGET', mem, seqfield) or '0') >= seq then
  local totals = item()
  totals[5] = {}
  return totals
end
redis.call('HSET', mem, seqfield, seq)
redis.call('HINCRBYFLOAT', mem, '$usd', ARGV[1])
redis.call('HINCRBY', mem, '$tokens', ARGV[2])
redis.call('HINCRBY', mem, '$turns', ARGV[3])
redis.call('HINCRBYFLOAT', mem, '$s', ARGV[4])
redis.call('EXPIRE', mem, ARGV[12])

local alerts = {}
local function check(scope, name, spent, cap, flags, prefix)
  cap = tonumber(cap)
  if cap <= 0 then return end
  for _, level in ipairs({'soft', 'hard'}) do
    local line = level == 'soft' and cap * share or cap
    if tonumber(spent) >= line and redis.call('HSETNX', flags, prefix .. level, 1) == 1 then
      redis.call('HINCRBY', stats, 'budget_alerts:' .. scope .. ':' .. level, 1)
      table.insert(alerts, {scope, name, level, spent, tostring(cap)})
    end
  end
end
if redis.call('EXISTS', run) == 1 then
  local spent = redis.call('HINCRBYFLOAT', run, 'spent_usd', ARGV[1])
  check('run', '', spent, ARGV[8], run, 'alert:')
end
local fleet = redis.call('HINCRBYFLOAT', day, 'fleet', ARGV[1])
check('fleet', '', fleet, ARGV[10], day, 'alert:fleet:')
if tenant ~= '' then
  local spent = redis.call('HINCRBYFLOAT', day, 'tenant:' .. tenant, ARGV[1])
  check('tenant', tenant, spent, ARGV[9], day, 'alert:tenant:' .. tenant .. ':')
end
redis.call('EXPIRE', day, ARGV[13])
local totals = item()
totals[5] = alerts
return totals
