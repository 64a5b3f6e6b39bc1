-- uses: forgotten
-- One record of a life, unless that life was forgotten. KEYS: the record's hash, tombstones, the
-- retention index. ARGV: execution, the record, the writer's Execution UID, 'nx' (the first write
-- wins, as HSETNX) or 'set' (HSET), now ('' leaves the index alone).
-- Returns {'forgotten'}, {'written'}, or {'kept', the stored record} ('nx' only).
if forgotten(KEYS[2], ARGV[1], ARGV[3]) then return {'forgotten'} end
if ARGV[4] == 'nx' then
  if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 0 then
    return {'kept', redis.call('HGET', KEYS[1], ARGV[1])}
  end
else
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
end
if ARGV[5] ~= '' then redis.call('ZADD', KEYS[3], ARGV[5], ARGV[1]) end
return {'written'}
