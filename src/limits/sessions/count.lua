-- Live sessions of Switchyard (src/limits/sessions/shared.rs), atomic: a sorted set per user
-- budget and one per tenant, member = session id, score = when the entry lapses (ms, Redis's
-- clock, so every replica counts on one clock). An entry is refreshed with its session
-- record's time-to-live and removed when the session ends; a crashed replica's entries lapse.
-- Both keys carry the tenant's hash tag.
--
-- KEYS[1] = the user's set, KEYS[2] = the tenant's set.
-- ARGV[1] = 'admit' | 'refresh' | 'release'; ARGV[2] = session id; ARGV[3] = time-to-live
--           (ms); ARGV[4] = sessions per user; ARGV[5] = sessions of the tenant (0: no bound).
-- Returns {refused, sessions}: refused is 0 (admitted, refreshed or released), 1 (the user's
-- bound) or 2 (the tenant's); sessions is the tenant's live sessions after the operation.
local op = ARGV[1]
local id = ARGV[2]
if op == 'release' then
  redis.call('ZREM', KEYS[1], id)
  redis.call('ZREM', KEYS[2], id)
  return {0, redis.call('ZCARD', KEYS[2])}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[3])
local lapses = now + ttl
if op == 'refresh' then
  -- XX: a session released meanwhile is not brought back.
  for i = 1, 2 do
    if redis.call('ZADD', KEYS[i], 'XX', 'CH', lapses, id) == 1 then
      redis.call('PEXPIRE', KEYS[i], ttl)
    end
  end
  return {0, redis.call('ZCARD', KEYS[2])}
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
local all = redis.call('ZCARD', KEYS[2])
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[4]) then
  return {1, all}
end
local tenant = tonumber(ARGV[5])
if tenant > 0 and all >= tenant then
  return {2, all}
end
for i = 1, 2 do
  redis.call('ZADD', KEYS[i], lapses, id)
  redis.call('PEXPIRE', KEYS[i], ttl)
end
return {0, all + 1}
