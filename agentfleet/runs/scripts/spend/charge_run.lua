-- The run's part of charge.lua, after charge_item.lua counted the report.
-- KEYS: run, the run's spend by downstream, the run's own budget
-- ARGV: US dollars, downstream, the run cap when the run has no budget of its own, alert
--       share, run ttl (s)
-- Returns the alerts raised.
local alerts = {}
count_run(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5], alerts)
return alerts
