-- Helpers shared by every limiter script; the loader puts this file in front of each one,
-- after the shared library (`now_ms()`). Times are milliseconds of Redis server time.
--
-- A downstream's token buckets are refilled and charged together, so they share one record:
-- a JSON array of each bucket's tokens, then the time they were counted. A missing record is a
-- set of full buckets, which is why a record is set to expire exactly when all would be full.

-- Tokens in each bucket at `now`, from a record (false when missing). `rates` are tokens per
-- millisecond.
local function bucket_levels(record, rates, capacities, now)
  local levels = {}
  if not record then
    for b = 1, #capacities do
      levels[b] = capacities[b]
    end
    return levels
  end
  local stored = cjson.decode(record)
  local elapsed = math.max(0, now - stored[#stored])
  for b = 1, #capacities do
    levels[b] = math.min(capacities[b], stored[b] + elapsed * rates[b])
  end
  return levels
end

local function buckets_store(key, levels, rates, capacities, now)
  local full_in = 0
  for b = 1, #capacities do
    full_in = math.max(full_in, (capacities[b] - levels[b]) / rates[b])
  end
  if full_in <= 0 then
    redis.call('DEL', key)
    return
  end
  local record = {}
  for b = 1, #levels do
    record[b] = levels[b]
  end
  record[#record + 1] = now
  redis.call('SET', key, cjson.encode(record), 'PX', math.ceil(full_in))
end

-- Holders whose lease has not run out; expired holders lose their slot here, and are counted
-- in `reclaimed` (kept `idle` ms) when that key is given.
local function sem_count(key, now, reclaimed, idle)
  local gone = redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  if gone > 0 and reclaimed then
    redis.call('INCRBY', reclaimed, gone)
    redis.call('PEXPIRE', reclaimed, idle)
  end
  return redis.call('ZCARD', key)
end

-- The holders set lives `keep` ms past its longest lease, so that a lease that runs out while
-- held is still there for the next acquire to take back and count.
local function sem_expire(key, keep)
  local top = redis.call('ZRANGE', key, '-1', '-1', 'WITHSCORES')
  if top[2] then
    redis.call('PEXPIREAT', key, math.ceil(tonumber(top[2])) + keep)
  end
end

-- Milliseconds until a slot is likely to free. With `count` holders that each hold for about
-- `hold` ms, started at random times, the k-th release is expected after k * hold / (count + 1);
-- a lease expiry bounds it. Without a hold-time estimate yet, `unknown` ms is the hint.
local function sem_wait(key, hold_key, limit, count, now, unknown)
  local k = count - limit + 1
  local hint = unknown
  local hold = tonumber(redis.call('GET', hold_key))
  if hold then
    hint = k * hold / (count + 1)
  end
  local kth = redis.call('ZRANGE', key, k - 1, k - 1, 'WITHSCORES')
  if kth[2] then
    hint = math.min(hint, tonumber(kth[2]) - now)
  end
  return math.max(1, hint)
end
