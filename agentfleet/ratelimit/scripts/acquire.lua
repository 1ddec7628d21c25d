-- All-or-nothing admission: pauses, semaphores and token buckets are checked together, and
-- nothing is taken unless everything grants, so a refusal never leaks a lease or a token.
--
-- KEYS: registry, n_pause pause keys, n_bucket buckets, n_sem pairs (holders, hold-time key)
-- ARGV[1]: the arguments fixed for a given set of downstreams, as one JSON array, so the client
--   encodes one string rather than a dozen on the hot path (and cjson parses it fastest):
--   n_pause, n_bucket, n_sem, idle ttl ms, unknown-hold hint ms, lease ttl ms,
--   n_bucket pairs (rate per second, capacity), n_sem limits
-- ARGV[2]: lease id; ARGV[3 .. 2 + n_bucket]: cost per bucket; then names to register
-- Returns 0 when granted, else wait ms * 256 + the blocker's position (1-based) in the list of
-- pauses, then buckets, then semaphores. One integer is the cheapest reply to send and parse.

local fixed = cjson.decode(ARGV[1])
local n_pause, n_bucket, n_sem = fixed[1], fixed[2], fixed[3]
local idle, unknown, ttl = fixed[4], fixed[5], fixed[6]
local lease = ARGV[2]
local now = now_ms()

local wait, blocker = 0, 0
local function block(w, position)
  if w > wait or blocker == 0 then
    wait, blocker = w, position
  end
end

-- One read for every pause and bucket.
local states = {}
if n_pause + n_bucket > 0 then
  states = redis.call('MGET', unpack(KEYS, 2, 1 + n_pause + n_bucket))
end

for i = 1, n_pause do
  local paused_until = tonumber(states[i])
  if paused_until and paused_until > now then
    block(paused_until - now, i)
  end
end

local buckets = {}
for i = 1, n_bucket do
  local rate = fixed[5 + 2 * i] / 1000
  local capacity = fixed[6 + 2 * i]
  local cost = tonumber(ARGV[2 + i])
  -- A bucket the request costs nothing from (say, no token estimate) neither blocks nor changes.
  if cost > 0 then
    local level = bucket_level(states[n_pause + i], rate, capacity, now)
    -- A cost above capacity could never be met; it is granted from a full bucket and leaves
    -- the bucket in debt, so the long-run rate still holds.
    local need = math.min(cost, capacity)
    if level < need then
      block((need - level) / rate, n_pause + i)
    end
    buckets[#buckets + 1] = {KEYS[1 + n_pause + i], level - cost, rate, capacity}
  end
end

local sem_at = 2 + n_pause + n_bucket
for i = 1, n_sem do
  local key, hold_key = KEYS[sem_at + 2 * (i - 1)], KEYS[sem_at + 2 * i - 1]
  local limit = fixed[6 + 2 * n_bucket + i]
  local count = sem_count(key, now)
  if count >= limit and not redis.call('ZSCORE', key, lease) then
    block(sem_wait(key, hold_key, limit, count, now, unknown), n_pause + n_bucket + i)
  end
end

local register_at = 3 + n_bucket
if register_at <= #ARGV then
  for a = register_at, #ARGV do
    redis.call('ZADD', KEYS[1], now, ARGV[a])
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - idle)
  redis.call('PEXPIRE', KEYS[1], idle)
end

if blocker > 0 then
  return math.max(1, math.ceil(wait)) * 256 + blocker
end

for i = 1, n_sem do
  local key = KEYS[sem_at + 2 * (i - 1)]
  redis.call('ZADD', key, now + ttl, lease)
  sem_expire(key)
end
for _, b in ipairs(buckets) do
  bucket_store(b[1], b[2], b[3], b[4], now)
end
return 0
