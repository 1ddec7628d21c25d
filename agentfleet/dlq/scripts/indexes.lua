-- Helpers of the dead-letter store's scripts. Index keys are built here from the prefix
-- (ARGV[1]): indexes move with the entry's fields, which the caller cannot know before the
-- script reads them. That ties the store to one Redis node.

local dims = {'category', 'downstream', 'run', 'fingerprint'}
local counted = {category = true, downstream = true, fingerprint = true}

-- Drop `id` from the index of `dim` = `value`, and count it out.
local function unindex(p, id, dim, value)
  redis.call('SREM', p .. ':i:' .. dim .. ':' .. value, id)
  if counted[dim] and redis.call('HINCRBY', p .. ':n:' .. dim, value, '-1') <= 0 then
    redis.call('HDEL', p .. ':n:' .. dim, value)
    if dim == 'fingerprint' then redis.call('HDEL', p .. ':fp', value) end
  end
end
