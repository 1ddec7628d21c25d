-- How long one client must still wait before its credentials are checked again.
-- KEYS: the client's failure hash (fields n, until)
-- ARGV: none
-- Returns: milliseconds left (0: it may try now). Reads only, so safe to run twice.
local locked_until = tonumber(redis.call('HGET', KEYS[1], 'until') or '0')
local left = locked_until - now_ms()
if left > 0 then
  return math.ceil(left)
end
return 0
