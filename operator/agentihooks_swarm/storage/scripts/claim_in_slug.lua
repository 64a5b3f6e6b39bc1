-- uses: slug_owner, owner_uid, forgotten, name_owner
-- The slug's claim and the name's in one script (one round trip for a launch that reads nothing
-- of the slug's between the two): the name is claimed only in a slug the namespace owns.
-- KEYS: the swarm's namespace key, tombstones, owners, index, then every hash of LAUNCHED. ARGV: the
-- namespace, execution, the claim, now, and '1' when the claimant is known to have launched.
-- Returns {the slug's owner}, when it is another namespace, else {ARGV[1], what claim_name returns}.
local slug = claim_slug(KEYS[1], ARGV[1])
if slug ~= ARGV[1] then return {slug} end
return {slug, claim_name(KEYS, 2, ARGV[2], ARGV[3], ARGV[4], ARGV[5])}
