-- Undo a graph step's failure (it is being requeued): forget its status and stored outcome,
-- and un-skip the steps that were skipped only because of it.
-- KEYS: the item's graph hash, the run hash, the step's outcome
-- ARGV: step, spec JSON (as graph_advance.lua)
-- Returns 1 when the step had failed, else 0.
local g, run = KEYS[1], KEYS[2]
local step = ARGV[1]
local spec = cjson.decode(ARGV[2])
if redis.call('HGET', g, step) ~= 'failed' then return 0 end
redis.call('HDEL', g, step)
redis.call('DEL', KEYS[3])
redis.call('HINCRBY', run, 'step:' .. step .. ':failed', '-1')
for _, name in ipairs(spec.order) do
  if redis.call('HGET', g, name) == 'skipped' then
    local blocked = false
    for _, dep in ipairs(spec.after[name]) do
      local s = redis.call('HGET', g, dep)
      if s == 'failed' or s == 'skipped' then blocked = true end
    end
    if not blocked then
      redis.call('HDEL', g, name, name .. ':r')
      redis.call('HINCRBY', run, 'step:' .. name .. ':skipped', '-1')
    end
  end
end
return 1
