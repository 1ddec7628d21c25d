-- All-or-nothing admission: pauses, semaphores and token buckets are checked together, and
-- nothing is taken unless everything grants, so a refusal never leaks a lease or a token.
--
-- KEYS: registry, n_pause pause keys, n_sem pairs (holders zset, hold-time key), n_bucket buckets
-- ARGV: n_pause, n_sem, n_bucket, lease id, lease ttl ms, idle ttl ms, unknown-hold hint ms,
--       n_sem limits, n_bucket triples (rate per second, capacity, cost), names to register
-- Returns {granted 0/1, wait ms, blocker kind (1 pause, 2 semaphore, 3 bucket), blocker index}.

local n_pause, n_sem, n_bucket = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local lease, ttl = ARGV[4], tonumber(ARGV[5])
local idle, unknown = tonumber(ARGV[6]), tonumber(ARGV[7])
local now = now_ms()

local denied, wait, kind, index = false, 0, 0, 0
local function block(w, k, i)
  denied = true
  if w > wait or kind == 0 then
    wait, kind, index = w, k, i
  end
end

local key_at = 2
for i = 1, n_pause do
  local paused_until = tonumber(redis.call('GET', KEYS[key_at]))
  if paused_until and paused_until > now then
    block(paused_until - now, 1, i)
  end
  key_at = key_at + 1
end

local arg_at = 8
local sem_keys = {}
for i = 1, n_sem do
  local key, hold_key = KEYS[key_at], KEYS[key_at + 1]
  local limit = tonumber(ARGV[arg_at])
  local count = sem_count(key, now)
  if count >= limit and not redis.call('ZSCORE', key, lease) then
    block(sem_wait(key, hold_key, limit, count, now, unknown), 2, i)
  end
  sem_keys[i] = key
  key_at, arg_at = key_at + 2, arg_at + 1
end

local buckets = {}
for i = 1, n_bucket do
  local rate = tonumber(ARGV[arg_at]) / 1000
  local capacity, cost = tonumber(ARGV[arg_at + 1]), tonumber(ARGV[arg_at + 2])
  -- A bucket the request costs nothing from (say, no token estimate) neither blocks nor changes.
  if cost > 0 then
    local level = bucket_level(KEYS[key_at], rate, capacity, now)
    -- A cost above capacity could never be met; it is granted from a full bucket and leaves
    -- the bucket in debt, so the long-run rate still holds.
    local need = math.min(cost, capacity)
    if level < need then
      block((need - level) / rate, 3, i)
    end
    buckets[#buckets + 1] = {KEYS[key_at], rate, capacity, level - cost}
  end
  key_at, arg_at = key_at + 1, arg_at + 3
end

if arg_at <= #ARGV then
  for a = arg_at, #ARGV do
    redis.call('ZADD', KEYS[1], now, ARGV[a])
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - idle)
  redis.call('PEXPIRE', KEYS[1], idle)
end

if denied then
  return {0, math.ceil(wait), kind, index}
end

for i = 1, n_sem do
  redis.call('ZADD', sem_keys[i], now + ttl, lease)
  sem_expire(sem_keys[i])
end
for _, b in ipairs(buckets) do
  bucket_store(b[1], b[4], b[2], b[3], now)
end
return {1, 0, 0, 0}
