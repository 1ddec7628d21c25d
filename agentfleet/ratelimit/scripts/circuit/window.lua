-- Helpers of the circuit breaker's scripts. A downstream's window is a hash of buckets:
-- `f:{n}`, `s:{n}` and `a:{n}` count failures, successes and started calls in bucket `n`
-- (bucket = floor(seconds / (window / buckets))).

-- Sums the window's buckets and drops the ones that fell out of it.
local function window_sums(w, current, nb)
  local fails, oks, started = 0, 0, 0
  local fields = redis.call('HGETALL', w)
  for i = 1, #fields, 2 do
    local name, n = fields[i], tonumber(fields[i + 1])
    local kind = string.sub(name, 1, 1)
    if tonumber(string.sub(name, 3)) <= current - nb then
      redis.call('HDEL', w, name)
    elseif kind == 'f' then
      fails = fails + n
    elseif kind == 's' then
      oks = oks + n
    else
      started = started + n
    end
  end
  return fails, oks, started
end
