-- Takes a slot at one gated upstream for Switchyard (src/limits/concurrency/leases.rs),
-- atomically: leases past their expiry are dropped (a crashed replica's among them), then
-- the lease is added if fewer than the cap are held. A replica may ask for more leases to
-- keep in its pool (src/limits/concurrency/pool.rs): granted only out of plenty, at most
-- 1/16 of the slots still free after this one.
--
-- KEYS[1]: the upstream's leases, a sorted set: lease id -> expiry (ms, Redis's clock).
-- ARGV[1] = max in flight, ARGV[2] = lease time (ms), ARGV[3] = the replica's nonce,
-- ARGV[4] = the first lease number, ARGV[5] = the extra leases asked for. Lease ids are
-- `<nonce>:<number>`, numbered on from the first.
-- Returns how many leases were taken: 0 when every slot is held, else 1 + the extra granted.
local SHARE = 16
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local free = tonumber(ARGV[1]) - redis.call('ZCARD', KEYS[1])
if free <= 0 then
  return 0
end
local n = 1 + math.max(0, math.min(tonumber(ARGV[5]), math.floor((free - 1) / SHARE)))
local lease = tonumber(ARGV[2])
local first = tonumber(ARGV[4])
local add = {}
for i = 0, n - 1 do
  add[#add + 1] = now + lease
  add[#add + 1] = ARGV[3] .. ':' .. string.format('%.0f', first + i)
end
redis.call('ZADD', KEYS[1], unpack(add))
redis.call('PEXPIRE', KEYS[1], lease)
return n
