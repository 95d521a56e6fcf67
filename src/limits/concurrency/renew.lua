-- Renews the leases one replica holds at one gated upstream (src/limits/concurrency/leases.rs):
-- each one still there expires a lease time from now; one given back or expired meanwhile is
-- not added again (XX).
--
-- KEYS[1]: the upstream's leases. ARGV[1] = lease time (ms); ARGV[2..] = the lease ids.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[1])
for i = 2, #ARGV do
  redis.call('ZADD', KEYS[1], 'XX', now + lease, ARGV[i])
end
redis.call('PEXPIRE', KEYS[1], lease)
return 0
