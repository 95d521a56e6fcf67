-- Takes a slot at one gated upstream for Switchyard (src/limits/concurrency/leases.rs),
-- atomically: leases past their expiry are dropped (a crashed replica's among them), then
-- the lease is added if fewer than the cap are held.
--
-- KEYS[1]: the upstream's leases, a sorted set: lease id -> expiry (ms, Redis's clock).
-- ARGV[1] = max in flight, ARGV[2] = lease time (ms), ARGV[3] = the lease id.
-- Returns 1 when the slot is taken, 0 when every slot is held.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then
  return 0
end
local lease = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], now + lease, ARGV[3])
redis.call('PEXPIRE', KEYS[1], lease)
return 1
