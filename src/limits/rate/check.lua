-- One rate check of Switchyard (src/limits/rate/shared.rs), atomic: every token bucket and
-- quota counter it involves is charged, or none is. All keys carry the tenant's hash tag.
--
-- A bucket is stored as the time it is full again (microseconds since the epoch, Redis's
-- clock, so every replica counts on one clock) and expires then: a missing key is a full
-- bucket. A quota is a counter that expires after its period.
--
-- Besides the charge, a replica may ask for credit on a bucket, to spend later without a
-- round trip (src/limits/rate/allotted.rs): granted only out of plenty, at most 1/16 of what
-- is left after the charge, in whole charges, and charged like the rest.
--
-- KEYS: the buckets, then the quota counters.
-- ARGV[1] = number of buckets; then per bucket: cost, tolerance, ask (microseconds: the
--           tokens taken, the burst and the credit asked, times the refill interval); then
--           per quota: limit, cost, expiry (Unix seconds).
-- Returns {0, 0, 0, credit...} when everything was charged, with the credit granted per
-- bucket; else {bucket, wait, quota}: the bucket (1-based) that would wait
-- longest and its wait in microseconds (0, 0 if none), and the first quota (1-based among
-- the quotas) that is used up (0 if none).
local SHARE = 16
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local buckets = tonumber(ARGV[1])
local refused, wait = 0, 0
local full = {}
for i = 1, buckets do
  local cost = tonumber(ARGV[3 * i - 1])
  local tolerance = tonumber(ARGV[3 * i])
  local at = tonumber(redis.call('GET', KEYS[i]) or '0') or 0
  if at < now then at = now end
  local next = at + cost
  local over = next - now - tolerance
  if over > wait then refused, wait = i, over end
  full[i] = next
end
local quota = 0
local a = 3 * buckets + 2
for j = 1, #KEYS - buckets do
  local used = tonumber(redis.call('GET', KEYS[buckets + j]) or '0') or 0
  if used + tonumber(ARGV[a + 1]) > tonumber(ARGV[a]) then
    quota = j
    break
  end
  a = a + 3
end
if refused > 0 or quota > 0 then
  return {refused, wait, quota}
end
local granted = {0, 0, 0}
for i = 1, buckets do
  local cost = tonumber(ARGV[3 * i - 1])
  local tolerance = tonumber(ARGV[3 * i])
  local ask = tonumber(ARGV[3 * i + 1])
  -- Whole charges only: a part of one could never be spent.
  local credit = math.min(ask, math.floor((tolerance - (full[i] - now)) / SHARE))
  if cost > 0 then credit = math.floor(credit / cost) * cost end
  if credit < 0 then credit = 0 end
  full[i] = full[i] + credit
  granted[#granted + 1] = credit
  local px = math.ceil((full[i] - now) / 1000)
  redis.call('SET', KEYS[i], string.format('%.0f', full[i]), 'PX', string.format('%.0f', px))
end
a = 3 * buckets + 2
for j = 1, #KEYS - buckets do
  redis.call('INCRBY', KEYS[buckets + j], ARGV[a + 1])
  redis.call('EXPIREAT', KEYS[buckets + j], ARGV[a + 2])
  a = a + 3
end
return granted
