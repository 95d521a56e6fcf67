-- One rate check of Switchyard (src/limits/rate/shared.rs), atomic: every token bucket and
-- quota counter it involves is charged, or none is. All keys carry the tenant's hash tag.
--
-- A bucket is stored as the time it is full again (microseconds since the epoch, Redis's
-- clock, so every replica counts on one clock) and expires then: a missing key is a full
-- bucket. A quota is a counter that expires after its period.
--
-- KEYS: the buckets, then the quota counters.
-- ARGV[1] = number of buckets; then per bucket: cost, tolerance (microseconds: the tokens
--           taken and the burst, times the refill interval); then per quota: limit, cost,
--           expiry (Unix seconds).
-- Returns {0, 0, 0} when everything was charged; else {bucket, wait, quota}: the bucket (1-based)
-- that would wait longest and its wait in microseconds (0, 0 if none), and the first quota
-- (1-based among the quotas) that is used up (0 if none).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local buckets = tonumber(ARGV[1])
local refused, wait = 0, 0
local full = {}
for i = 1, buckets do
  local cost = tonumber(ARGV[2 * i])
  local tolerance = tonumber(ARGV[2 * i + 1])
  local at = tonumber(redis.call('GET', KEYS[i]) or '0') or 0
  if at < now then at = now end
  local next = at + cost
  local over = next - now - tolerance
  if over > wait then refused, wait = i, over end
  full[i] = next
end
local quota = 0
local a = 2 * buckets + 2
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
for i = 1, buckets do
  local px = math.ceil((full[i] - now) / 1000)
  redis.call('SET', KEYS[i], string.format('%.0f', full[i]), 'PX', string.format('%.0f', px))
end
a = 2 * buckets + 2
for j = 1, #KEYS - buckets do
  redis.call('INCRBY', KEYS[buckets + j], ARGV[a + 1])
  redis.call('EXPIREAT', KEYS[buckets + j], ARGV[a + 2])
  a = a + 3
end
return {0, 0, 0}
