-- Count one spending report of a delivery: for its item, its run, its tenant today and the
-- fleet today; raise each budget's alerts once. (On a Redis Cluster, the three parts run as
-- charge_item.lua, charge_run.lua and charge_day.lua.)
-- KEYS: item memory, run, the run's spend by downstream, the run's own budget, the day's spend
--       by downstream, the day's spend by tenant, the day's alert flags
-- ARGV: US dollars, tokens, turns, seconds, delivery token, report number (1, 2, ... per
--       delivery, sent in order), tenant ('' for none), downstream ('' when no call was
--       priced), the run cap when the run has no budget of its own, tenant cap, fleet cap
--       (0 for none), alert share, memory ttl, run ttl, day ttl (s)
-- Returns {item $usd, $tokens, $turns, $s, alerts}; an alert is {scope, name, level, spent, cap}.
local share = tonumber(ARGV[12])
local alerts = {}
if count_item(KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[13]) == 1 then
  count_run(KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[8], ARGV[9], share, ARGV[14], alerts)
  count_day(KEYS[5], KEYS[6], KEYS[7], ARGV[1], ARGV[8], ARGV[7], ARGV[10], ARGV[11], share, ARGV[15], alerts)
end
local totals = item_totals(KEYS[1])
totals[5] = alerts
return totals
