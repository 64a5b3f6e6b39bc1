-- KEYS[t], KEYS[t+1]: the tombstones and their index. Marks a forgotten life (see FORGOTTEN) and
-- removes tombstones older than the horizon, a bounded batch at a time. Needs owner_uid (each
-- script that uses this one lists it first).
local function tombstone(tombs, index, execution, owner, now, horizon, batch)
  local uid = owner_uid(owner)
  local marks = {execution}
  if uid ~= '' then marks[2] = execution .. '|' .. uid end
  for _, mark in ipairs(marks) do
    redis.call('HSET', tombs, mark, now)
    redis.call('ZADD', index, now, mark)
  end
  local old = redis.call('ZRANGEBYSCORE', index, '-inf', now - horizon, 'LIMIT', 0, batch)
  for _, mark in ipairs(old) do
    redis.call('HDEL', tombs, mark)
    redis.call('ZREM', index, mark)
  end
end
