-- Store an item's outcome (first write wins), release its claim, and count it once for its run.
-- KEYS: run, done, events, outcome, deliveries, stats, done-per-second bucket, claim, inputs,
--       active runs, the item's memory
-- ARGV: index, outcome JSON, kind, dead-lettered (1/0), cost, seconds, ttl, store (1/0),
--       record (1/0), now, claim token, run id
-- Returns {recorded, done, total, run ended, aggregate path or ''}.
local run, done, events, outkey, deliv = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local stats, bucket, claim, inputs, active = KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10]
local idx, body, kind, dead = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local cost, secs, ttl, store, record, now = ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9], ARGV[10]
local token, run_id = ARGV[11], ARGV[12]
redis.call('DEL', deliv)
if token ~= '' and redis.call('GET', claim) == token then redis.call('DEL', claim) end
if store == '1' then
  local ok = redis.call('SET', outkey, body, 'EX', ttl, 'NX')
  if not ok then body = redis.call('GET', outkey) or body end
  -- Steps and checkpoints live as long as the outcome they led to.
  redis.call('EXPIRE', KEYS[11], ttl)
end
if record ~= '1' or redis.call('EXISTS', run) == 0 then return {0, 0, 0, 0, ''} end
if redis.call('HSETNX', done, idx, '1') == 0 then return {0, 0, 0, 0, ''} end
redis.call('HDEL', inputs, idx)
redis.call('XADD', events, '*', 'kind', 'outcome', 'idx', idx, 'outcome', body)
local n = redis.call('HINCRBY', run, 'done', 1)
redis.call('HINCRBY', run, kind, 1)
if dead == '1' then redis.call('HINCRBY', run, 'dead_lettered', 1) end
redis.call('HINCRBYFLOAT', run, 'cost_usd', cost)
redis.call('HINCRBYFLOAT', run, 'worker_seconds', secs)
redis.call('EXPIRE', done, ttl)
redis.call('EXPIRE', events, ttl)
redis.call('HINCRBY', stats, kind, 1)
if dead == '1' then redis.call('HINCRBY', stats, 'dead_lettered', 1) end
redis.call('HINCRBYFLOAT', stats, 'cost_usd', cost)
redis.call('HINCRBYFLOAT', stats, 'worker_seconds', secs)
redis.call('HSET', stats, 'last_done_at', now)
redis.call('INCR', bucket)
redis.call('EXPIRE', bucket, 120)
local total = tonumber(redis.call('HGET', run, 'tasks_total') or '0')
if n >= total then
  redis.call('HSETNX', run, 'ended_at', now)
  if redis.call('HGET', run, 'status') == 'running' then redis.call('HSET', run, 'status', 'finished') end
  redis.call('XADD', events, '*', 'kind', 'end')
  redis.call('HINCRBY', stats, 'runs_finished', 1)
  local aggregate = redis.call('HGET', run, 'aggregate') or ''
  -- A run with an aggregate, or compensations to run, stays active until they are done.
  local undoing = redis.call('HGET', run, 'compensation') == 'requested'
  if aggregate == '' and not undoing then redis.call('SREM', active, run_id) end
  return {1, n, total, 1, aggregate}
end
return {1, n, total, 0, ''}
