-- Release a claim held by this token, or (with a prefix) by any token starting with it.
-- KEYS: claim
-- ARGV: token or prefix, 'prefix' to match by prefix
local owner = redis.call('GET', KEYS[1])
if not owner then return 0 end
if owner == ARGV[1] or (ARGV[2] == 'prefix' and string.sub(owner, 1, #ARGV[1]) == ARGV[1]) then
  return redis.call('DEL', KEYS[1])
end
return 0
