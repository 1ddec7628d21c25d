-- Helpers shared by every limiter script; the loader puts this file in front of each one.
-- Times are milliseconds of Redis server time, so workers with skewed clocks agree.
-- A bucket is a string "tokens:ts". A missing bucket is a full one, which is why a bucket key
-- is set to expire exactly when it would have refilled.

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
end

-- Tokens in a bucket whose stored value is `state` (false when missing) at `now`.
-- `rate` is tokens per millisecond.
local function bucket_level(state, rate, capacity, now)
  if not state then
    return capacity
  end
  local sep = string.find(state, ':', 1, true)
  local tokens, ts = tonumber(string.sub(state, 1, sep - 1)), tonumber(string.sub(state, sep + 1))
  local elapsed = now - ts
  if elapsed < 0 then
    elapsed = 0
  end
  return math.min(capacity, tokens + elapsed * rate)
end

local function bucket_store(key, tokens, rate, capacity, now)
  if tokens >= capacity then
    redis.call('DEL', key)
  else
    redis.call('SET', key, tokens .. ':' .. now, 'PX', math.ceil((capacity - tokens) / rate))
  end
end

-- Holders whose lease has not run out; expired holders lose their slot here.
local function sem_count(key, now)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  return redis.call('ZCARD', key)
end

-- The holders set lives as long as its longest lease.
local function sem_expire(key)
  local top = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if top[2] then
    redis.call('PEXPIREAT', key, math.ceil(tonumber(top[2])) + 1)
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
