-- KEYS: journal, retained. ARGV: execution, the new entry. A journal entry is created once, and
-- never once the execution is retained (a step that read "no journal" before another retained it
-- must not leave a new entry behind; one left beside the retained record by a retain that failed
-- after its write goes). Returns {'pinned'}, {'journal', entry} or {'retained', record}.
local retained = redis.call('HGET', KEYS[2], ARGV[1])
if retained then
  redis.call('HDEL', KEYS[1], ARGV[1])
  return {'retained', retained}
end
local existing = redis.call('HGET', KEYS[1], ARGV[1])
if existing then return {'journal', existing} end
redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2])
return {'pinned'}
