-- The indices of the items a run counted: each bit set in its bitmap, then the fields of its
-- ``done`` hash (see first_count in delivery/parts.lua). Bit 0 is the high bit of the first byte.
-- KEYS: the run's bitmap of counted items, its done hash
local found = redis.call('HKEYS', KEYS[2])
local bits = redis.call('GET', KEYS[1])
if not bits then return found end
local at, byte = #found, 0
for i = 1, #bits do
  byte = string.byte(bits, i)
  if byte == 255 then
    for b = 0, 7 do found[at + b + 1] = (i - 1) * 8 + b end
    at = at + 8
  elseif byte ~= 0 then
    for b = 0, 7 do
      local weight = 2 ^ (7 - b)
      if byte >= weight then
        at = at + 1
        found[at] = (i - 1) * 8 + b
        byte = byte - weight
      end
    end
  end
end
return found
