-- The head of every token-store script (app/backends/redis/store.py), run before its body.
-- KEYS[1] and KEYS[2] are the digests and expiring keys, ARGV[1] to ARGV[4] the key
-- prefixes. A token's user, family and lineage keys are found from the token's own
-- hash, so they cannot be declared in KEYS: the store needs one Redis (with replicas if
-- you like), not Redis Cluster.
local digests_key, expiring_key = KEYS[1], KEYS[2]
local token_prefix, user_prefix, family_prefix = ARGV[1], ARGV[2], ARGV[3]
local lineage_prefix = ARGV[4]
-- the index entries of a token, whose hash may be gone already (its TTL)
local function unindex(digest, username)
    redis.call('ZREM', digests_key, digest)
    redis.call('ZREM', user_prefix .. username, digest)
    redis.call('ZREM', expiring_key, digest .. username)
end
-- every token of a family, live and retired, its lineage, and the family itself
local function forget_family(family, username)
    local family_key = family_prefix .. family
    for _, member in ipairs(redis.call('ZRANGE', family_key, 0, -1)) do
        local lineage = redis.call('HGET', token_prefix .. member, 'lineage')
        if lineage then
            redis.call('DEL', lineage_prefix .. lineage)
        end
        redis.call('DEL', token_prefix .. member)
        unindex(member, username)
    end
    redis.call('DEL', family_key)
end
-- the family whose lineage is given, and its username, if it lives at now; else nil. A
-- lineage key outlives its family only if an older version of these scripts forgot it.
local function family_of_lineage(lineage, now)
    if lineage == '' then
        return nil, nil
    end
    local record = redis.call('HMGET', lineage_prefix .. lineage, 'family', 'username',
                              'expires_at')
    if not record[1] or (record[3] and tonumber(now) >= tonumber(record[3])) then
        return nil, nil
    end
    if redis.call('EXISTS', family_prefix .. record[1]) == 0 then
        redis.call('DEL', lineage_prefix .. lineage)
        return nil, nil
    end
    return record[1], record[2]
end
-- one token, with its whole family if it has one; returns whether it was known, and
-- the family ('' for none) and username
local function forget(digest)
    local token_key = token_prefix .. digest
    local record = redis.call('HMGET', token_key, 'username', 'family')
    redis.call('ZREM', digests_key, digest)
    local username, family = record[1], record[2]
    if not username then
        return 0, '', ''
    end
    if family then  -- the family's members include this token: its lineage goes too
        forget_family(family, username)
    end
    redis.call('DEL', token_key)
    unindex(digest, username)
    return 1, family or '', username
end
-- up to limit tokens whose expiry is at or before now, found by score
local function purge(now, limit)
    local due = redis.call('ZRANGEBYSCORE', expiring_key, '-inf', now, 'LIMIT', 0, limit)
    for _, member in ipairs(due) do
        local digest, username = string.sub(member, 1, 64), string.sub(member, 65)
        local token_key = token_prefix .. digest
        local record = redis.call('HMGET', token_key, 'family', 'lineage')
        redis.call('DEL', token_key)
        unindex(digest, username)
        if record[1] then
            redis.call('ZREM', family_prefix .. record[1], digest)
        end
        if record[2] then  -- its family expires with it, all at once
            redis.call('DEL', lineage_prefix .. record[2])
        end
    end
    return #due
end
local function milliseconds_until(expires_at, now)
    return math.max(1, math.floor((tonumber(expires_at) - now) * 1000))
end
-- a user's score for a token issued at microsecond issued_us: above every token they
-- hold, so that eviction goes by order of issue even within one microsecond or second
local function next_score(user_key, issued_us)
    local newest = redis.call('ZRANGE', user_key, -1, -1, 'WITHSCORES')[2]
    local score = tonumber(issued_us)
    if newest and tonumber(newest) >= score then
        score = tonumber(newest) + 1
    end
    return string.format('%.0f', score)  -- %.14g, Lua's default, would round it
end
