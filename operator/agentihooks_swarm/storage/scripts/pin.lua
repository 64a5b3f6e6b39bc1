-- uses: forgotten
-- KEYS: journal, retained, tombstones. ARGV: execution, the new entry, the writer's Execution UID.
-- A journal entry is created once, and never once the execution is retained (a step that read "no
-- journal" before another retained it must not leave a new entry behind; one left beside the
-- retained record by a retain that failed after its write goes), nor for a forgotten life.
-- Returns {'pinned'}, {'journal', entry}, {'retained', record} or {'forgotten'}.
if forgotten(KEYS[3], ARGV[1], ARGV[3]) then return {'forgotten'} end
local retained = redis.call('HGET', KEYS[2], ARGV[1])
if retained then
  redis.call('HDEL', KEYS[1], ARGV[1])
  return {'retained', retained}
end
local existing = redis.call('HGET', KEYS[1], ARGV[1])
if existing then return {'journal', existing} end
redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2])
return {'pinned'}
