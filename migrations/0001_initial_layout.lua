-- Layout 1 of the Switchyard keyspace (prefix configurable, default "sy"):
--   <p>:v1:sess:{<tenant>:<user>:<session>}   session record (JSON), sliding TTL
--   <p>:v1:sid:<session>                       "<tenant>\n<user>" owning the id (security logs only)
--   <p>:v1:get:{<tenant>:<user>:<session>}     replica holding the session's GET stream (TTL)
--   <p>:v1:ev:{<tenant>:<user>:<session>}:<stream>  stream of SSE events (XADD 0-<seq>; fields
--                                              d = framed event, f = 1 on the last), MAXLEN, TTL
--   <p>:v1:replica:<replica>                   pub/sub channel of one replica
--   <p>:v1:broadcast                           pub/sub channel of every replica
--   <p>:v1:signing-secret                      the replicas' shared signing secret (created on
--                                              first start with SET NX; added within layout 1)
--   <p>:v1:lim:{<tenant>}:rate:<limit>[:<user>]  token bucket of a rate limit: the time it
--                                              is full again (µs), expiring then (added
--                                              within layout 1)
--   <p>:v1:lim:{<tenant>}:quota:<period>:<user>  a user's tool calls in one UTC day (d<days>)
--                                              or month (m<yyyymm>), expiring after it (added
--                                              within layout 1)
--   <p>:meta:layout                            applied layout version
--   <p>:meta:migrations                        hash: version -> applied at (ms since epoch)
--   (on a Redis Cluster these two are <p>:meta:{<p>}:layout and <p>:meta:{<p>}:migrations,
--   one slot, so this script runs on one node)
-- Nothing existed before layout 1, so this step only records the version.
-- KEYS[1] = <p>:meta:layout, KEYS[2] = <p>:meta:migrations; ARGV[1] = now (ms), ARGV[2] = version
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
if current >= tonumber(ARGV[2]) then
  return 0
end
redis.call('SET', KEYS[1], ARGV[2])
redis.call('HSET', KEYS[2], ARGV[2], ARGV[1])
return 1
