-- Log a user out everywhere as of a time (RefreshTokenStore.log_out_everywhere). KEYS[3]:
-- the user's sorted set, KEYS[4]: the cut-offs' sorted set. ARGV[5..7]: username, the
-- time (whole seconds), now. Unless the user's cut-off is that time or later already,
-- forgets every session begun by then and raises the cut-off; returns how many live
-- sessions ended.
local username, at, now = ARGV[5], tonumber(ARGV[6]), tonumber(ARGV[7])
local cutoff = redis.call('ZSCORE', KEYS[4], username)
if cutoff and tonumber(cutoff) >= at then
    return 0  -- done already: a login since then stays
end
local ended = 0
for _, member in ipairs(redis.call('ZRANGE', KEYS[3], 0, -1)) do
    local r = redis.call('HMGET', token_prefix .. member, 'logged_in_at', 'issued_at',
                         'expires_at')
    local login = tonumber(r[1] or r[2])
    if login and login <= at then
        if not (r[3] and tonumber(r[3]) <= now) then
            ended = ended + 1
        end
        forget(member)
    end
end
redis.call('ZADD', KEYS[4], at, username)
return ended
