-- The item's part of charge.lua.
-- KEYS: item memory
-- ARGV: US dollars, tokens, turns, seconds, delivery token, report number, memory ttl (s)
-- Returns {item $usd, $tokens, $turns, $s, 1 when this call counted the report}.
local counted = count_item(KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7])
local totals = item_totals(KEYS[1])
totals[5] = counted
return totals
