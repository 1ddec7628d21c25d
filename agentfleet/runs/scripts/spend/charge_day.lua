-- The day's part of charge.lua, after charge_item.lua counted the report.
-- KEYS: the day's spend by downstream, the day's spend by tenant, the day's alert flags
-- ARGV: US dollars, downstream, tenant ('' for none), tenant cap, fleet cap (0 for none),
--       alert share, day ttl (s)
-- Returns the alerts raised.
local alerts = {}
count_day(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], tonumber(ARGV[6]), ARGV[7], alerts)
return alerts
