-- Extend every claim still held by its token; 1 per kept claim, 0 per lost one.
-- KEYS: claims
-- ARGV: claim ttl (ms), then one token per key
local kept = {}
for i, key in ipairs(KEYS) do
  if redis.call('GET', key) == ARGV[i + 1] then
    redis.call('PEXPIRE', key, ARGV[1])
    kept[i] = 1
  else
    kept[i] = 0
  end
end
return kept
