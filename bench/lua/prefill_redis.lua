-- Fill a Redis token store with tokens number ARGV[2] to ARGV[3], as app/backends/redis/store.py
-- keeps a login under SPEC.md's defaults: the token's hash, its user's sorted set, the
-- digests' sorted set. ARGV: salt, first, last, issued_at, the microsecond of issue,
-- then the token, user and digests key prefixes. Four tokens per user.
local salt, issued_at, micro = ARGV[1], ARGV[4], tonumber(ARGV[5])
local token_prefix, user_prefix, digests_key = ARGV[6], ARGV[7], ARGV[8]
for n = tonumber(ARGV[2]), tonumber(ARGV[3]) do
    local digest = redis.sha1hex(salt .. n) .. string.sub(redis.sha1hex(n .. salt), 1, 24)
    local user = 'user' .. math.floor(n / 4)
    redis.call('HSET', token_prefix .. digest, 'username', user, 'issued_at', issued_at)
    redis.call('ZADD', user_prefix .. user, string.format('%.0f', micro + n), digest)
    redis.call('ZADD', digests_key, 0, digest)
end
return 1
