-- KEYS: the swarm's namespace key, then every hash that holds its records or refusals.
-- ARGV: the namespace that owns the slug.
-- Returns 1 when released, 0 when another namespace owns it (or nobody does), -N when the N-th
-- hash still holds something (records are never handed to another namespace).
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
for i = 2, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 1 then return -(i - 1) end
end
redis.call('DEL', KEYS[1])
return 1
