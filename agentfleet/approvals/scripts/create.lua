-- Record a pending pause unless it is there already (a redelivered body reaching the same call).
--
-- KEYS: <root>:all (it routes the script; every key below shares its hash tag)
-- ARGV: root, id, approval JSON, run id, event key ('' for an approval), timeout s ('' none),
--       on_timeout, the item's message JSON, seconds to keep the run's index, item index
-- Returns {1 when made now else 0, status}.

local root, id = ARGV[1], ARGV[2]
local rec = root .. ':a:' .. id
local status = redis.call('HGET', rec, 'status')
if status then return {0, status} end
local now = now_s()
local exp = ''
if ARGV[6] ~= '' then exp = tostring(now + tonumber(ARGV[6])) end
redis.call('HSET', rec, 'a', ARGV[3], 'status', 'pending', 'run', ARGV[4], 'ev', ARGV[5],
  'exp', exp, 'ot', ARGV[7], 'msg', ARGV[8], 'created', tostring(now), 'idx', ARGV[10])
redis.call('ZADD', root .. ':all', now, id)
redis.call('ZADD', root .. ':pending', now, id)
if exp ~= '' then redis.call('ZADD', root .. ':due', tonumber(exp), id) end
local run = root .. ':run:' .. ARGV[4]
redis.call('SADD', run, id)
redis.call('EXPIRE', run, tonumber(ARGV[9]))
local parked = root .. ':parked:' .. ARGV[4]
redis.call('HSET', parked, ARGV[10], id)
redis.call('EXPIRE', parked, tonumber(ARGV[9]))
if ARGV[5] ~= '' then redis.call('SADD', root .. ':ev:' .. ARGV[5], id) end
return {1, 'pending'}
