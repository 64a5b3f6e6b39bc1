-- uses: slug_owner
-- KEYS: the swarm's namespace key. ARGV: the namespace claiming the swarm's slug.
-- Returns the namespace that owns the slug: ARGV[1] when claimed now or before, else the other.
return claim_slug(KEYS[1], ARGV[1])
