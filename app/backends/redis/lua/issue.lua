-- ARGV[5..16]: digest, username, now, issued_at, expires_at ('' for none), the
-- per-user limit (0 for none), the purge batch, now in microseconds, the session's id,
-- its last use (to the minute), address and User-Agent. KEYS[3]: the cut-offs' sorted
-- set. Issues under a lifetime or a limit; returns {the user's cut-off or false, how many
-- of the user's sessions the limit ended}.
local digest, username, now, issued_at = ARGV[5], ARGV[6], tonumber(ARGV[7]), ARGV[8]
local expires_at, per_user = ARGV[9], tonumber(ARGV[10])
purge(ARGV[7], tonumber(ARGV[11]))
local user_key = user_prefix .. username
local ended = 0
if per_user > 0 then
    local live = {}
    for _, member in ipairs(redis.call('ZRANGE', user_key, 0, -1)) do  -- oldest first
        local record = redis.call('HMGET', token_prefix .. member, 'username', 'expires_at')
        if not record[1] then
            unindex(member, username)
        elseif record[2] and tonumber(record[2]) <= now then
            forget(member)
        else
            table.insert(live, member)
        end
    end
    for index = 1, #live - per_user + 1 do
        forget(live[index])
        ended = ended + 1
    end
end
local token_key = token_prefix .. digest
redis.call('HSET', token_key, 'username', username, 'issued_at', issued_at, 'session', ARGV[13],
           'logged_in_at', issued_at, 'last_used_at', ARGV[14], 'address', ARGV[15],
           'user_agent', ARGV[16])
redis.call('ZADD', user_key, next_score(user_key, ARGV[12]), digest)
redis.call('ZADD', digests_key, 0, digest)
if expires_at ~= '' then
    redis.call('HSET', token_key, 'expires_at', expires_at)
    redis.call('ZADD', expiring_key, expires_at, digest .. username)
    redis.call('PEXPIRE', token_key, milliseconds_until(expires_at, now))
end
return {redis.call('ZSCORE', KEYS[3], username), ended}
