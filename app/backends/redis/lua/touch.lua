-- A session's last use, written at most once a minute (RefreshTokenStore.owner_of), into
-- the token's hash if it still exists (a write must not bring back a forgotten token).
-- KEYS[1]: the token's hash. ARGV[1]: now to the minute.
local last = redis.call('HGET', KEYS[1], 'last_used_at')
if redis.call('EXISTS', KEYS[1]) == 1 and (not last or tonumber(last) < tonumber(ARGV[1])) then
    redis.call('HSET', KEYS[1], 'last_used_at', ARGV[1])
end
return 0
