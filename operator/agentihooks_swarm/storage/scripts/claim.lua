-- uses: owner_uid, forgotten, name_owner
-- KEYS: tombstones, owners, index, then every hash of LAUNCHED. ARGV: execution, the claim, now,
-- and '1' when the claimant is known to have launched under this name.
-- Returns what claim_name returns.
return claim_name(KEYS, 1, ARGV[1], ARGV[2], ARGV[3], ARGV[4])
