-- Take one delivery off a task id's count of unfinished deliveries: the delivery holding a
-- claim token handed its item back without its worker dying, so it is no step towards poison.
-- Once per token: sent again (a dropped connection), it changes nothing.
-- KEYS: deliveries counter, the token's mark (<counter>:back:<token>)
-- ARGV: the mark's ttl (ms)
-- Returns 1 when a delivery was taken off, 0 when this token's was already.
if not redis.call('SET', KEYS[2], '1', 'NX', 'PX', ARGV[1]) then return 0 end
if redis.call('DECR', KEYS[1]) <= 0 then redis.call('DEL', KEYS[1]) end
return 1
