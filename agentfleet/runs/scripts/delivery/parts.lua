-- The halves of starting and finishing a delivery, sent in front of each script of this folder.
-- An item's keys live in its run's slot unless its idempotency key was given with key=
-- (agentfleet/keys.py); then the item half and the run half are separate scripts.

-- Claim the item for this delivery and count the delivery, unless it has a stored outcome or
-- another delivery holds a live claim. Returns stored or '', deliveries, verdict, claim ms left.
-- A delivery counts once however often its start is sent. A token of its own (``preclaimed``
-- '0') takes the claim in the call that counts it, so finding the claim held by that token
-- means an earlier send counted it. A token that claimed the item up front (a batch's,
-- ``preclaimed`` '1') marks the count at ``<deliveries>:<token>``, living as long as the claim.
local function claim_item(outkey, deliv, claim, deliveries_ttl, token, claim_ms, cancelled, preclaimed)
  local stored = redis.call('GET', outkey)
  if stored then return stored, 0, 'stored', 0 end
  if cancelled then return '', 0, 'cancelled', 0 end
  local fresh = redis.call('SET', claim, token, 'NX', 'PX', claim_ms)
  if not fresh then
    if redis.call('GET', claim) ~= token then return '', 0, 'busy', redis.call('PTTL', claim) end
    redis.call('PEXPIRE', claim, claim_ms)
  end
  local counted = not fresh and preclaimed ~= '1'
  if preclaimed == '1' then
    counted = not redis.call('SET', deliv .. ':' .. token, '1', 'NX', 'PX', claim_ms)
  end
  if counted then return '', tonumber(redis.call('GET', deliv) or '1'), 'claimed', 0 end
  -- The first delivery sets the counter with its expiry in one command.
  local n = 1
  if not redis.call('SET', deliv, '1', 'EX', deliveries_ttl, 'NX') then n = redis.call('INCR', deliv) end
  return '', n, 'claimed', 0
end

-- Store the outcome under its key (first write wins), release this delivery's claim and forget
-- its deliveries; the item's memory (steps, checkpoints) then lives as long as the outcome.
-- Fenced: while the item has no outcome and another delivery holds a live claim on it (this
-- one's claim lapsed and was taken over), nothing is written. A lapsed claim nobody took does
-- not fence: nothing else is running the item. Returns the outcome that stands, 0, 1 when
-- this call stored it else 0; or '', claim ms left, 0 when fenced. (The helpers here return
-- several values rather than a table: a table a call builds is one more for Lua to collect.)
local function settle_item(outkey, deliv, claim, memory, body, token, store, ttl)
  local found = redis.call('MGET', outkey, claim)
  local stored, holder = found[1], found[2]
  if store == '1' and not stored and holder and holder ~= token then
    return '', redis.call('PTTL', claim), 0
  end
  if token ~= '' and holder == token then
    redis.call('DEL', deliv, claim)
  else
    redis.call('DEL', deliv)
  end
  local wrote = 0
  if store == '1' then
    if stored then
      body = stored
    else
      redis.call('SET', outkey, body, 'EX', ttl)
      wrote = 1
    end
    redis.call('EXPIRE', memory, ttl)
  end
  return body, 0, wrote
end

-- Redis's clock, in epoch seconds: when an outcome is stored, whatever the delay between the
-- worker's clock and the moment its call reached Redis.
local function server_now()
  local t = redis.call('TIME')
  return t[1] .. '.' .. string.format('%06d', tonumber(t[2]))
end

-- Mark a run whose last item just got its outcome as ended. Returns 1, done, total, 1,
-- aggregate, stays active: a run that ended stays active while its aggregate or
-- compensations are to come.
local function end_run(run, events, n, total, now)
  redis.call('HSETNX', run, 'ended_at', now)
  if redis.call('HGET', run, 'status') == 'running' then redis.call('HSET', run, 'status', 'finished') end
  redis.call('XADD', events, '*', 'kind', 'end')
  local aggregate = redis.call('HGET', run, 'aggregate') or ''
  local undoing = redis.call('HGET', run, 'compensation') == 'requested'
  return 1, n, total, 1, aggregate, (aggregate ~= '' or undoing) and 1 or 0
end

-- Append one entry to the run's timeline (runs/spans.py): item ``idx``, the lane of worker
-- ``node`` ('' for none: lane -1), ``stamp`` (an event id, or epoch ms), the attempt's ``dur``
-- in ms, its ``kind`` and ``cost`` in micro-dollars ('' or '0' for none). A worker seen for
-- the first time in this run gets the next lane number; ``known`` is the worker's lane when it
-- learnt it from an earlier call ('' when not: a worker's lane never changes in a run). Returns
-- the lane.
local function add_span(spans, lanes, idx, node, stamp, dur, kind, cost, ttl, known)
  local lane = '-1'
  if node ~= '' and known ~= '' then
    lane = known
  elseif node ~= '' then
    lane = redis.call('HGET', lanes, node)
    if not lane then
      lane = tostring(redis.call('HLEN', lanes))
      redis.call('HSET', lanes, node, lane)
      redis.call('EXPIRE', lanes, ttl)
    end
  end
  local entry = idx .. ' ' .. lane .. ' ' .. stamp .. ' ' .. dur .. ' ' .. kind
  if cost ~= '' and cost ~= '0' then entry = entry .. ' ' .. cost end
  if redis.call('RPUSH', spans, entry) == 1 then redis.call('EXPIRE', spans, ttl) end
  return lane
end

-- Redis's clock in whole epoch milliseconds, as text.
local function now_ms_text()
  return string.format('%d', math.floor(now_ms()))
end

-- US dollars (text) as whole micro-dollars (text).
local function micro_usd(cost)
  return string.format('%d', math.floor((tonumber(cost) or 0) * 1000000 + 0.5))
end

-- Whether this is the first time item ``idx`` is counted for its run, marking it counted: its
-- bit in the run's bitmap (``SETBIT`` answers the bit it replaced, in constant time). The
-- ``done`` hash holds what the bitmap cannot: an index no bit stands for, and the items of a run
-- whose counting began before the bitmap (an older worker's); a small hash is a list Redis
-- searches field by field, which cost more than anything else an outcome does.
local function first_count(done, recorded, idx)
  local bit = item_bit(idx)
  if bit then
    return redis.call('SETBIT', recorded, bit, '1') == 0 and redis.call('HEXISTS', done, idx) == 0
  end
  return redis.call('HSETNX', done, idx, '1') == 1
end

-- Count the outcome once for its run (``secs``: the body's time in whole microseconds) and
-- note it on the run's timeline (``node``, ``dur``: the worker and its attempt's ms, ``known``
-- its lane if known, see add_span); a run it ends ends at Redis's clock. Returns recorded,
-- done, total, run ended, aggregate, stays active, the worker's lane or ''. A run still being
-- dispatched (``dispatching`` set) does not end here: its total is not known yet
-- (``end_dispatch.lua`` ends it if every item already has its outcome).
local function record_outcome(run, done, recorded, events, inputs, spans, lanes, idx, body, kind, dead, cost,
                              secs, ttl, node, dur, known)
  local total = redis.call('HGET', run, 'tasks_total')
  if not total then return 0, 0, 0, 0, '', 0, '' end
  if not first_count(done, recorded, idx) then return 0, 0, 0, 0, '', 0, '' end
  redis.call('HDEL', inputs, idx)
  local event = redis.call('XADD', events, '*', 'kind', 'outcome', 'idx', idx, 'outcome', body)
  local letter = 'f'
  if kind == 'succeeded' then letter = 's' elseif kind == 'cancelled' then letter = 'c' end
  local charged = cost ~= '0' and cost ~= '' and tonumber(cost) ~= 0
  local lane = add_span(spans, lanes, idx, node, event, dur, letter, charged and micro_usd(cost) or '', ttl, known)
  -- Counted by Redis in its own integers: HINCRBY finds and moves one field in C, where reading
  -- the fields with the head and writing them back means a number format in Lua for each.
  local n = redis.call('HINCRBY', run, 'done', '1')
  redis.call('HINCRBY', run, kind, '1')
  redis.call('HINCRBY', run, 'worker_us', secs)
  if dead == '1' then redis.call('HINCRBY', run, 'dead_lettered', '1') end
  if charged then redis.call('HINCRBYFLOAT', run, 'cost_usd', cost) end
  if n == 1 then
    -- Created with the first outcome (a reopen never deletes the stream or the bitmap, and
    -- keeps the hash unless it empties it, when the next outcome is the first again).
    redis.call('EXPIRE', recorded, ttl)
    redis.call('EXPIRE', done, ttl)
    redis.call('EXPIRE', events, ttl)
  end
  total = tonumber(total)
  -- Looked up last, and only for what may be the last outcome: a field a hash does not hold is
  -- searched to its end.
  if n >= total and redis.call('HEXISTS', run, 'dispatching') == 0 then
    local ended, done_now, of, over, aggregate, active = end_run(run, events, n, total, server_now())
    return ended, done_now, of, over, aggregate, active, lane
  end
  return 1, n, total, 0, '', 0, lane
end
