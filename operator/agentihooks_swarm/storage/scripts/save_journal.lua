-- uses: journal_version
-- KEYS: journal. ARGV: execution, the version the writer read, the new entry (one version on).
-- 1: saved; 0: the entry is gone (retained or removed meanwhile); -1: another write came first.
local current = redis.call('HGET', KEYS[1], ARGV[1])
if not current then return 0 end
if version_of(current) ~= tonumber(ARGV[2]) then return -1 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
return 1
