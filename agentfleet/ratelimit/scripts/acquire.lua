-- All-or-nothing admission: pauses, token buckets and semaphores are checked together, and
-- nothing is taken unless everything grants, so a refusal never leaks a lease or a token.
--
-- KEYS: registry, n_pause pause keys, n_group bucket records (one per downstream),
--       n_sem triples (holders, hold-time key, reclaimed-leases counter)
-- ARGV[1]: the arguments fixed for a given set of downstreams, as one JSON array, so the client
--   encodes one string rather than a dozen on the hot path (and cjson parses it fastest):
--   n_pause, n_group, n_sem, idle ttl ms, unknown-hold hint ms, lease ttl ms,
--   per group (bucket count, then per bucket: rate per second, capacity), n_sem limits
-- ARGV[2]: lease id; then the cost of each bucket, group after group; then names to register
-- Returns 0 when granted, else wait ms * 256 + the blocker's position (1-based) in the list of
-- pauses, then buckets, then semaphores. One integer is the cheapest reply to send and parse.

local fixed = cjson.decode(ARGV[1])
local n_pause, n_group, n_sem = fixed[1], fixed[2], fixed[3]
local idle, unknown, ttl = fixed[4], fixed[5], fixed[6]
local lease = ARGV[2]
local now = now_ms()

local wait, blocker = 0, 0
local function block(w, position)
  if w > wait or blocker == 0 then
    wait, blocker = w, position
  end
end

-- One read for every pause and bucket record.
local states = {}
if n_pause + n_group > 0 then
  states = redis.call('MGET', unpack(KEYS, 2, 1 + n_pause + n_group))
end

for i = 1, n_pause do
  local paused_until = tonumber(states[i])
  if paused_until and paused_until > now then
    block(paused_until - now, i)
  end
end

local at, cost_at, position = 7, 3, n_pause
local groups = {}
for g = 1, n_group do
  local rates, capacities = {}, {}
  for b = 1, fixed[at] do
    rates[b], capacities[b] = fixed[at + 2 * b - 1] / 1000, fixed[at + 2 * b]
  end
  at = at + 1 + 2 * #rates
  local levels = bucket_levels(states[n_pause + g], rates, capacities, now)
  local charged = false
  for b = 1, #rates do
    local cost = tonumber(ARGV[cost_at])
    position, cost_at = position + 1, cost_at + 1
    -- A bucket the call costs nothing from (say, no token estimate) never blocks it.
    if cost > 0 then
      -- A cost above capacity could never be met; it is granted from a full bucket and
      -- leaves the bucket in debt, so the long-run rate still holds.
      local need = math.min(cost, capacities[b])
      if levels[b] < need then
        block((need - levels[b]) / rates[b], position)
      end
      levels[b] = levels[b] - cost
      charged = true
    end
  end
  if charged then
    groups[#groups + 1] = {KEYS[1 + n_pause + g], levels, rates, capacities}
  end
end

local sem_at = 2 + n_pause + n_group
for i = 1, n_sem do
  local key, hold_key = KEYS[sem_at + 3 * (i - 1)], KEYS[sem_at + 3 * i - 2]
  local limit = fixed[at + i - 1]
  local count = sem_count(key, now, KEYS[sem_at + 3 * i - 1], idle)
  if count >= limit and not redis.call('ZSCORE', key, lease) then
    block(sem_wait(key, hold_key, limit, count, now, unknown), position + i)
  end
end

if cost_at <= #ARGV then
  for a = cost_at, #ARGV do
    redis.call('ZADD', KEYS[1], now, ARGV[a])
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - idle)
  redis.call('PEXPIRE', KEYS[1], idle)
end

if blocker > 0 then
  return math.max(1, math.ceil(wait)) * 256 + blocker
end

for i = 1, n_sem do
  local key = KEYS[sem_at + 3 * (i - 1)]
  redis.call('ZADD', key, now + ttl, lease)
  sem_expire(key, idle)
end
for _, g in ipairs(groups) do
  buckets_store(g[1], g[2], g[3], g[4], now)
end
return 0
