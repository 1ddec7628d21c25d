-- Count one spending report of a delivery: for its item, its run, its tenant today and the
-- fleet today; raise each budget's alerts once.
-- KEYS: item memory, run, the run's spend by downstream, the run's own budget, the day's spend
--       by downstream, the day's spend by tenant, the day's alert flags, stats
-- ARGV: US dollars, tokens, turns, seconds, delivery token, report number (1, 2, ... per
--       delivery, sent in order), tenant ('' for none), downstream ('' when no call was
--       priced), the run cap when the run has no budget of its own, tenant cap, fleet cap
--       (0 for none), alert share, memory ttl, run ttl, day ttl (s)
-- Returns {item $usd, $tokens, $turns, $s, alerts}; an alert is {scope, name, level, spent, cap}.
local mem, run, run_spend, budget, day, tenants, flags, stats =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local usd, token, seq, tenant, downstream = ARGV[1], ARGV[5], tonumber(ARGV[6]), ARGV[7], ARGV[8]
local share = tonumber(ARGV[12])
local function item()
  local t = redis.call('HMGET', mem, '$usd', '$tokens', '$turns', '$s')
  return {t[1] or '0', t[2] or '0', t[3] or '0', t[4] or '0'}
end
local function total(hash)
  local sum = 0
  for _, v in ipairs(redis.call('HVALS', hash)) do sum = sum + tonumber(v) end
  return sum
end
local seqfield = '$seq:' .. token
if tonumber(redis.call('HGET', mem, seqfield) or '0') >= seq then
  local totals = item()
  totals[5] = {}
  return totals
end
redis.call('HSET', mem, seqfield, seq)
redis.call('HINCRBYFLOAT', mem, '$usd', usd)
redis.call('HINCRBY', mem, '$tokens', ARGV[2])
redis.call('HINCRBY', mem, '$turns', ARGV[3])
redis.call('HINCRBYFLOAT', mem, '$s', ARGV[4])
redis.call('EXPIRE', mem, ARGV[13])
if tonumber(usd) > 0 and downstream ~= '' then
  redis.call('HINCRBYFLOAT', run_spend, downstream, usd)
  redis.call('EXPIRE', run_spend, ARGV[14])
  redis.call('HINCRBYFLOAT', day, downstream, usd)
  redis.call('EXPIRE', day, ARGV[15])
end

local alerts = {}
local function check(scope, name, spent, cap, hash, prefix)
  cap = tonumber(cap)
  if not cap or cap <= 0 then return end
  for _, level in ipairs({'soft', 'hard'}) do
    local line = level == 'soft' and cap * share or cap
    if spent >= line and redis.call('HSETNX', hash, prefix .. level, 1) == 1 then
      redis.call('HINCRBY', stats, 'budget_alerts:' .. scope .. ':' .. level, 1)
      table.insert(alerts, {scope, name, level, tostring(spent), tostring(cap)})
    end
  end
end
if tonumber(usd) > 0 then
  if redis.call('EXISTS', run) == 1 then
    check('run', '', total(run_spend), redis.call('GET', budget) or ARGV[9], run, 'alert:')
  end
  check('fleet', '', total(day), ARGV[11], flags, 'fleet:')
  if tenant ~= '' then
    local spent = tonumber(redis.call('HINCRBYFLOAT', tenants, tenant, usd))
    redis.call('EXPIRE', tenants, ARGV[15])
    check('tenant', tenant, spent, ARGV[10], flags, 'tenant:' .. tenant .. ':')
  end
  redis.call('EXPIRE', flags, ARGV[15])
end
local totals = item()
totals[5] = alerts
return totals
