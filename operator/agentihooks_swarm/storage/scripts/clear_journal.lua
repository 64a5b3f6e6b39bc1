-- KEYS: journal, retained. ARGV: execution. A journal entry left beside a retained record (a retain
-- that failed after its write) goes; an entry of a cleanup in progress is never touched.
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 0 then return 0 end
return redis.call('HDEL', KEYS[1], ARGV[1])
