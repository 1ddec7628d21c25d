-- Store an entry, or update the entry of the same id in place (a redelivery).
--
-- KEYS: the stream (it routes the script; every key below shares its hash tag)
-- ARGV: prefix, id, entry JSON, category, downstream, run id, fingerprint, generation,
--       dead-lettered-at (Unix seconds), fingerprint sample JSON, then the entry's artifacts
--       as name, base64 bytes pairs (none: the entry has none)
-- Returns {stream id, 1 when the entry is new else 0}.
-- The artifacts replace any the entry had: what the entry lists is what its hash holds; the
-- bytes they take (as stored) are counted for the whole queue.

local p, id = ARGV[1], ARGV[2]
local entry = p .. ':e:' .. id
local new = {category = ARGV[4], downstream = ARGV[5], run = ARGV[6], fingerprint = ARGV[7]}
local old = redis.call('HMGET', entry, 'sid', 'category', 'downstream', 'run', 'fingerprint')
local sid = old[1]
local created = 0
if sid then
  for i, dim in ipairs(dims) do
    local before = old[i + 1]
    if before and before ~= new[dim] then unindex(p, id, dim, before) end
  end
else
  sid = redis.call('XADD', p .. ':stream', '*', 'id', id)
  created = 1
end
for _, dim in ipairs(dims) do
  if redis.call('SADD', p .. ':i:' .. dim .. ':' .. new[dim], id) == 1 and counted[dim] then
    redis.call('HINCRBY', p .. ':n:' .. dim, new[dim], '1')
  end
end
redis.call('HSET', p .. ':fp', new.fingerprint, ARGV[10])
redis.call('HSET', entry, 'data', ARGV[3], 'sid', sid, 'gen', ARGV[8], 'at', ARGV[9],
  'category', new.category, 'downstream', new.downstream, 'run', new.run, 'fingerprint', new.fingerprint)
local artifacts = p .. ':a:' .. id
local stored = 0
for i = 12, #ARGV, 2 do stored = stored + #ARGV[i] end
local before = tonumber(redis.call('HGET', entry, 'abytes') or '0')
redis.call('DEL', artifacts)
if #ARGV > 10 then
  redis.call('HSET', artifacts, unpack(ARGV, 11))
end
redis.call('HSET', entry, 'abytes', stored)
if stored ~= before then redis.call('INCRBY', p .. ':abytes', stored - before) end
return {sid, created}
