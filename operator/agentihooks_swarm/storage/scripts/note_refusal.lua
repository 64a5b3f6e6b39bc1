-- KEYS: fingerprints, seen, refusals. ARGV: fingerprint, now (epoch s), now (RFC 3339), member
-- (fingerprint|pod uid), the summary of a new fingerprint (JSON), max fingerprints, horizon, max
-- refusals kept. Counts one refused Pod once (0 when it was counted already), bounded: the oldest
-- seen fingerprint goes beyond the max, refusals older than the horizon or beyond the max go.
if redis.call('ZSCORE', KEYS[3], ARGV[4]) then return 0 end
local now = tonumber(ARGV[2])
redis.call('ZADD', KEYS[3], now, ARGV[4])
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now - tonumber(ARGV[7]))
local extra = redis.call('ZCARD', KEYS[3]) - tonumber(ARGV[8])
if extra > 0 then redis.call('ZREMRANGEBYRANK', KEYS[3], 0, extra - 1) end
local stored = redis.call('HGET', KEYS[1], ARGV[1])
local summary
if stored then
  summary = cjson.decode(stored)
  summary['count'] = summary['count'] + 1
  summary['last_seen'] = ARGV[3]
else
  if redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[6]) then
    local oldest = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
    if oldest then
      redis.call('HDEL', KEYS[1], oldest)
      redis.call('ZREM', KEYS[2], oldest)
    end
  end
  summary = cjson.decode(ARGV[5])
end
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(summary))
redis.call('ZADD', KEYS[2], now, ARGV[1])
return 1
