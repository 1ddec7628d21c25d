-- Record a graph step's final status for one item, skip what depended on a failed step, and
-- release the steps whose dependencies have all succeeded.
-- KEYS: the item's graph hash, the run hash, the run's inputs hash
-- ARGV: step, status ('succeeded' or 'failed'), spec JSON {order = [...], after = {step = [...]}}
--       (order is topological), US dollars, seconds, attempts, the item's index, ttl (s)
-- Returns {counted (1/0), released steps, skipped steps, item complete (1/0)}.
local g, run = KEYS[1], KEYS[2]
local step, status = ARGV[1], ARGV[2]
local spec = cjson.decode(ARGV[3])
-- Kept for a step requeued after the item's outcome dropped the run's copy of its input.
local input = redis.call('HGET', KEYS[3], ARGV[7])
if input then redis.call('HSETNX', g, '_input', input) end
if redis.call('HSETNX', g, step, status) == 0 then return {0, {}, {}, 0} end
redis.call('HINCRBYFLOAT', g, '_usd', ARGV[4])
redis.call('HINCRBYFLOAT', g, '_s', ARGV[5])
redis.call('HINCRBY', g, '_attempts', ARGV[6])
redis.call('HINCRBY', run, 'step:' .. step .. ':' .. status, '1')
local skipped, released = {}, {}
for _, name in ipairs(spec.order) do
  if redis.call('HEXISTS', g, name) == 0 then
    local all_ok = true
    for _, dep in ipairs(spec.after[name]) do
      local s = redis.call('HGET', g, dep)
      if s == 'failed' or s == 'skipped' then
        redis.call('HSET', g, name, 'skipped')
        redis.call('HINCRBY', run, 'step:' .. name .. ':skipped', '1')
        table.insert(skipped, name)
        all_ok = false
        break
      end
      if s ~= 'succeeded' then all_ok = false end
    end
    if all_ok and #spec.after[name] > 0 and redis.call('HSETNX', g, name .. ':r', '1') == 1 then
      table.insert(released, name)
    end
  end
end
redis.call('EXPIRE', g, ARGV[8])
for _, name in ipairs(spec.order) do
  if redis.call('HEXISTS', g, name) == 0 then return {1, released, skipped, 0} end
end
return {1, released, skipped, 1}
