-- Start a delivery of an item outside its run's slot: the item half of begin.lua. The caller
-- reads the run's status beside it and gives the claim back if the run was cancelled.
-- KEYS: outcome, deliveries counter, claim
-- ARGV: deliveries ttl (s), claim token, claim ttl (ms), 1 when the token claimed the item up front
--       (a batch's) else 0
-- Returns {stored outcome or '', deliveries, verdict, claim ms left}.
return {claim_item(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3], false, ARGV[4])}
