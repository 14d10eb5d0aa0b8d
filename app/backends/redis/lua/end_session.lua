-- End a user's live session (RefreshTokenStore.end_session). KEYS[3]: the user's sorted
-- set. ARGV[5]: the session's id, ARGV[6]: now. Returns 1 if it was found and forgotten
-- with its family, else 0.
for _, member in ipairs(redis.call('ZRANGE', KEYS[3], 0, -1)) do
    local r = redis.call('HMGET', token_prefix .. member, 'session', 'expires_at')
    if r[1] == ARGV[5] and not (r[2] and tonumber(r[2]) <= tonumber(ARGV[6])) then
        forget(member)
        return 1
    end
end
return 0
