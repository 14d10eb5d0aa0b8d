-- End a user's live session (RefreshTokenStore.end_session). KEYS[3]: the user's sorted
-- set. ARGV[5]: the session's id, ARGV[6]: now, ARGV[7]: the last use at or before which
-- a session is idle ('' for no idle timeout). Returns 1 if it was found and forgotten with
-- its family, else 0; an idle session is forgotten too, and 0 (it was over, and unlisted).
local idle = tonumber(ARGV[7])
for _, member in ipairs(redis.call('ZRANGE', KEYS[3], 0, -1)) do
    local r = redis.call('HMGET', token_prefix .. member, 'session', 'expires_at', 'last_used_at')
    if r[1] == ARGV[5] and not (r[2] and tonumber(r[2]) <= tonumber(ARGV[6])) then
        forget(member)
        if idle and r[3] and tonumber(r[3]) <= idle then
            return 0
        end
        return 1
    end
end
return 0
