-- Give tokens from before sessions their session (the store's version 2): KEYS: the
-- hashes of one family's tokens (or of one token never rotated). ARGV: the session's new
-- id, its login time, its last use. A hash gone meanwhile stays gone, and one that has a
-- session already keeps it.
for _, key in ipairs(KEYS) do
    if redis.call('EXISTS', key) == 1 and redis.call('HEXISTS', key, 'session') == 0 then
        redis.call('HSET', key, 'session', ARGV[1], 'logged_in_at', ARGV[2],
                   'last_used_at', ARGV[3], 'address', '', 'user_agent', '')
    end
end
return 0
