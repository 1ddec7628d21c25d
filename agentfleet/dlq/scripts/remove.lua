-- Delete entries with their artifacts (counted out of the queue's artifact bytes), index
-- entries and counts.
--
-- KEYS: the stream (it routes the script; every key below shares its hash tag)
-- ARGV: prefix, generation ('' for any), then the ids
-- Returns the ids that were there (and, with a generation, still of that generation).

local p, gen = ARGV[1], ARGV[2]
local removed = {}
for i = 3, #ARGV do
  local id = ARGV[i]
  local entry = p .. ':e:' .. id
  local f = redis.call('HMGET', entry, 'sid', 'gen', 'category', 'downstream', 'run', 'fingerprint', 'abytes')
  if f[1] and (gen == '' or f[2] == gen) then
    if f[7] and tonumber(f[7]) > 0 then redis.call('DECRBY', p .. ':abytes', f[7]) end
    redis.call('XDEL', p .. ':stream', f[1])
    for j, dim in ipairs(dims) do
      if f[j + 2] then unindex(p, id, dim, f[j + 2]) end
    end
    redis.call('DEL', entry, p .. ':a:' .. id)
    removed[#removed + 1] = id
  end
end
return removed
