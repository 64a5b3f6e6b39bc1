-- KEYS: refusals, budget, fingerprints. ARGV: now (epoch s), now (RFC 3339), window, max refusals,
-- same fingerprint ('1' or ''), the template's digest, the reset annotation's value.
-- Returns {'tripped', state}, {'cleared', the old state} or {'ok'}. A tripped budget stays tripped
-- until the template or the reset annotation differs from when it tripped; clearing it starts the
-- count afresh (refusals before the clearing do not count).
local now = tonumber(ARGV[1])
local state = redis.call('HGET', KEYS[2], 'state')
if state then
  local tripped = cjson.decode(state)
  if tripped['template'] == ARGV[6] and tripped['reset'] == ARGV[7] then return {'tripped', state} end
  redis.call('HDEL', KEYS[2], 'state')
  redis.call('HSET', KEYS[2], 'since', now)
  return {'cleared', state}
end
local since = tonumber(redis.call('HGET', KEYS[2], 'since') or '0')
local from = math.max(now - tonumber(ARGV[3]), since)
local counts, total = {}, 0
for _, member in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. from, '+inf')) do
  local fingerprint = string.match(member, '^([^|]*)|')
  counts[fingerprint] = (counts[fingerprint] or 0) + 1
  total = total + 1
end
local worst, most = nil, 0
for fingerprint, count in pairs(counts) do
  if count > most or (count == most and fingerprint < worst) then worst, most = fingerprint, count end
end
local count = total
if ARGV[5] == '1' then count = most end
if worst == nil or count < tonumber(ARGV[4]) then return {'ok'} end
local text = ''
local summary = redis.call('HGET', KEYS[3], worst)
if summary then text = cjson.decode(summary)['text'] end
state = cjson.encode({fingerprint = worst, text = text, count = count, window_seconds = tonumber(ARGV[3]),
  at = ARGV[2], template = ARGV[6], reset = ARGV[7]})
redis.call('HSET', KEYS[2], 'state', state)
return {'tripped', state}
