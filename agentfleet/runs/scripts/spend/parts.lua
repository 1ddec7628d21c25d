-- The parts of counting one spending report, sent in front of each script of this folder. On a
-- single Redis one script runs them all; on a Redis Cluster the item's, the run's and the
-- day's keys live in different slots, and each part is a script of its own.

-- Sum of a hash's values.
local function total(hash)
  local sum = 0
  for _, v in ipairs(redis.call('HVALS', hash)) do sum = sum + tonumber(v) end
  return sum
end

-- The item's totals: {$usd, $tokens, $turns, $s}.
local function item_totals(mem)
  local t = redis.call('HMGET', mem, '$usd', '$tokens', '$turns', '$s')
  return {t[1] or '0', t[2] or '0', t[3] or '0', t[4] or '0'}
end

-- Count the report for its item unless this delivery's report ``seq`` was counted before (a
-- retried call). Returns 1 when it counted now.
local function count_item(mem, usd, tokens, turns, secs, token, seq, ttl)
  local seqfield = '$seq:' .. token
  if tonumber(redis.call('HGET', mem, seqfield) or '0') >= tonumber(seq) then return 0 end
  redis.call('HSET', mem, seqfield, seq)
  redis.call('HINCRBYFLOAT', mem, '$usd', usd)
  redis.call('HINCRBY', mem, '$tokens', tokens)
  redis.call('HINCRBY', mem, '$turns', turns)
  redis.call('HINCRBYFLOAT', mem, '$s', secs)
  redis.call('EXPIRE', mem, ttl)
  return 1
end

-- Append to ``alerts`` each level of a budget crossed for the first time ({scope, name, level,
-- spent, cap}); ``hash`` holds the once-flags under ``prefix .. level``.
local function check(alerts, scope, name, spent, cap, hash, prefix, share)
  cap = tonumber(cap)
  if not cap or cap <= 0 then return end
  for _, level in ipairs({'soft', 'hard'}) do
    local line = level == 'soft' and cap * share or cap
    if spent >= line and redis.call('HSETNX', hash, prefix .. level, '1') == 1 then
      table.insert(alerts, {scope, name, level, tostring(spent), tostring(cap)})
    end
  end
end

-- The run's spend by downstream, and its budget's alerts.
local function count_run(run, run_spend, budget, usd, downstream, run_cap, share, ttl, alerts)
  if tonumber(usd) <= 0 then return end
  if downstream ~= '' then
    redis.call('HINCRBYFLOAT', run_spend, downstream, usd)
    redis.call('EXPIRE', run_spend, ttl)
  end
  if redis.call('EXISTS', run) == 1 then
    check(alerts, 'run', '', total(run_spend), redis.call('GET', budget) or run_cap, run, 'alert:', share)
  end
end

-- The day's spend by downstream and by tenant, and the fleet's and the tenant's daily alerts.
local function count_day(day, tenants, flags, usd, downstream, tenant, tenant_cap, fleet_cap, share, ttl, alerts)
  if tonumber(usd) <= 0 then return end
  if downstream ~= '' then
    redis.call('HINCRBYFLOAT', day, downstream, usd)
    redis.call('EXPIRE', day, ttl)
  end
  check(alerts, 'fleet', '', total(day), fleet_cap, flags, 'fleet:', share)
  if tenant ~= '' then
    local spent = tonumber(redis.call('HINCRBYFLOAT', tenants, tenant, usd))
    redis.call('EXPIRE', tenants, ttl)
    check(alerts, 'tenant', tenant, spent, tenant_cap, flags, 'tenant:' .. tenant .. ':', share)
  end
  redis.call('EXPIRE', flags, ttl)
end
