-- Append one failed attempt to an item's history, unless that very entry is there already (the
-- call sent again after a dropped connection): an entry names its attempt and the time it was
-- made, so two attempts never make the same text. The newest ``kept`` entries stay.
-- KEYS: the item's attempts (list)
-- ARGV: entry JSON, ttl (s), kept
-- Returns 1 when appended, 0 for an entry recorded before.
for _, entry in ipairs(redis.call('LRANGE', KEYS[1], '0', '-1')) do
  if entry == ARGV[1] then return 0 end
end
redis.call('RPUSH', KEYS[1], ARGV[1])
redis.call('LTRIM', KEYS[1], -tonumber(ARGV[3]), '-1')
redis.call('EXPIRE', KEYS[1], ARGV[2])
return 1
