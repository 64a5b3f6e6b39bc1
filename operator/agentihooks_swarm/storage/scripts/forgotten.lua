-- forgotten(tombs, execution, uid): whether the life of `execution` whose Execution has UID `uid`
-- was forgotten (`records forget` or the retention sweep left tombstone.lua's mark
-- 'execution|uid'). A step of that life still in flight (its Execution deleted, nothing holding
-- it) must not write its records back: each write for a life checks this in the same script, so
-- a forget cannot come between the check and the write. '' (a writer that names no life) is never
-- forgotten.
local function forgotten(tombs, execution, uid)
  return uid ~= '' and redis.call('HEXISTS', tombs, execution .. '|' .. uid) == 1
end
