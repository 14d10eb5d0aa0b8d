-- ARGV[5]: the digest, ARGV[6]: the digest of the token's lineage ('' for none), ARGV[7]:
-- now. Returns
-- {known, reused, family, username}: known is 1 if the token, or the family it belonged
-- to, was forgotten; reused is 1 if it was a retired member of the family, or one the
-- family forgot and knows by its lineage.
local digest, lineage = ARGV[5], ARGV[6]
local record = redis.call('HMGET', token_prefix .. digest, 'retired_at', 'expires_at')
local known, family, username = forget(digest)
if known == 1 then
    local live = not record[2] or tonumber(record[2]) > tonumber(ARGV[7])
    return {1, (record[1] and family ~= '' and live) and 1 or 0, family, username}
end
family, username = family_of_lineage(lineage, ARGV[7])
if not family then
    return {0, 0, '', ''}
end
forget_family(family, username)
return {1, 1, family, username}
