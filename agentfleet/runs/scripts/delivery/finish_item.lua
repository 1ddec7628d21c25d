-- The item half of finish.lua, for an item outside its run's slot; finish_run.lua follows.
-- KEYS: outcome, deliveries, claim, the item's memory
-- ARGV: outcome JSON, claim token, store (1/0), ttl
-- Returns {the outcome that stands (the first one stored), 0, 1 when this call stored it}, or
-- {'', claim ms left, 0} when another delivery holds the item's claim (nothing was written).
return {settle_item(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2], ARGV[3], ARGV[4])}
