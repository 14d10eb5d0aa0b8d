-- ARGV[5..15]: digest, successor's digest, username, now, issued_at, lifetime ('' for
-- none), grace, generations kept, purge batch, now in microseconds, the digest of the
-- token's lineage ('' for none), a new session id (for a token from before sessions),
-- the last use at or before which a session is idle ('' for no idle timeout), now to the
-- minute. Username '' takes the token's owner, whoever. Returns {outcome, family, owner}
-- (owner '' for unknown and other_user). The successor carries the token's session,
-- used now; an idle session is forgotten (outcome idle).
local digest, successor, username = ARGV[5], ARGV[6], ARGV[7]
local now, issued_at, lifetime = tonumber(ARGV[8]), ARGV[9], ARGV[10]
if lifetime ~= '' then
    purge(ARGV[8], tonumber(ARGV[13]))
end
local token_key = token_prefix .. digest
local record = redis.call('HMGET', token_key, 'username', 'family', 'generation', 'expires_at',
                          'retired_at', 'lineage', 'session', 'logged_in_at', 'last_used_at',
                          'address', 'user_agent', 'issued_at')
local owner, family, generation, expires_at = record[1], record[2], record[3], record[4]
if not owner then
    -- a token the family forgot, known by its lineage: reuse
    family, owner = family_of_lineage(ARGV[15], now)
    if not family then
        return {'unknown', '', ''}
    elseif username ~= '' and owner ~= username then
        return {'other_user', '', ''}
    end
    forget_family(family, owner)
    return {'reused', family, owner}
end
if expires_at and now >= tonumber(expires_at) then
    return {'unknown', '', ''}
end
if username ~= '' and owner ~= username then
    return {'other_user', '', ''}
end
username = owner
if not record[5] and ARGV[17] ~= '' and record[9] and tonumber(record[9]) <= tonumber(ARGV[17]) then
    forget(digest)
    return {'idle', '', owner}
end
family = family or digest
generation = tonumber(generation or '0')
local family_key, user_key = family_prefix .. family, user_prefix .. username
local function retire(member)
    redis.call('HSET', token_prefix .. member, 'retired_at', ARGV[8])
    redis.call('HDEL', token_prefix .. member, 'lineage')  -- the live token's alone
    redis.call('ZREM', digests_key, member)
    redis.call('ZREM', user_key, member)
end
local outcome = 'rotated'
if record[5] then
    local unused = nil
    local grace = tonumber(ARGV[11])
    -- no grace, no retry: a clock read a moment before another rotation is no excuse
    if grace > 0 and now < tonumber(record[5]) + grace then
        -- this token's own successor, if nothing rotated or replaced it yet: a sibling's
        -- successor (another retry's, rotated since) is not its to retry; a successor
        -- made before ``parent`` was recorded has none, so its retry is reuse
        for _, member in ipairs(redis.call('ZRANGEBYSCORE', family_key, generation + 1,
                                           generation + 1)) do
            local state = redis.call('HMGET', token_prefix .. member, 'username', 'retired_at',
                                     'parent')
            if state[1] and not state[2] and state[3] == digest then
                unused = member
            end
        end
    end
    if not unused then
        forget_family(family, username)
        return {'reused', family, username}
    end
    outcome = 'retried'
    retire(unused)  -- retired, not forgotten: whoever presents it later revokes the family
else
    redis.call('HSET', token_key, 'family', family, 'generation', generation)
    retire(digest)
    redis.call('ZADD', family_key, generation, digest)
end
if not expires_at and lifetime ~= '' then  -- a family older than the setting
    expires_at = tonumber(issued_at) + tonumber(lifetime)
    for _, member in ipairs(redis.call('ZRANGE', family_key, 0, -1)) do
        redis.call('HSET', token_prefix .. member, 'expires_at', expires_at)
        redis.call('ZADD', expiring_key, expires_at, member .. username)
        redis.call('PEXPIRE', token_prefix .. member, milliseconds_until(expires_at, now))
    end
end
local successor_key = token_prefix .. successor
redis.call('HSET', successor_key, 'username', username, 'issued_at', issued_at,
           'family', family, 'generation', generation + 1, 'parent', digest,
           'session', record[7] or ARGV[16], 'logged_in_at', record[8] or record[12],
           'last_used_at', ARGV[18], 'address', record[10] or '', 'user_agent', record[11] or '')
local lineage = record[6] or ARGV[15]
if lineage ~= '' then
    redis.call('HSET', successor_key, 'lineage', lineage)
    redis.call('HSET', lineage_prefix .. lineage, 'family', family, 'username', username)
end
redis.call('ZADD', user_key, next_score(user_key, ARGV[14]), successor)
redis.call('ZADD', digests_key, 0, successor)
redis.call('ZADD', family_key, generation + 1, successor)
if expires_at then
    redis.call('HSET', successor_key, 'expires_at', expires_at)
    redis.call('ZADD', expiring_key, expires_at, successor .. username)
    redis.call('PEXPIRE', successor_key, milliseconds_until(expires_at, now))
    redis.call('PEXPIRE', family_key, milliseconds_until(expires_at, now))
    if lineage ~= '' then
        redis.call('HSET', lineage_prefix .. lineage, 'expires_at', expires_at)
        redis.call('PEXPIRE', lineage_prefix .. lineage, milliseconds_until(expires_at, now))
    end
end
local cutoff = '(' .. (generation + 1 - tonumber(ARGV[12]))
for _, member in ipairs(redis.call('ZRANGEBYSCORE', family_key, '-inf', cutoff)) do
    redis.call('DEL', token_prefix .. member)
    unindex(member, username)
end
redis.call('ZREMRANGEBYSCORE', family_key, '-inf', cutoff)
return {outcome, family, username}
