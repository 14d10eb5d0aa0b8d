-- A page of a user's live sessions (RefreshTokenStore.sessions_of), newest login first,
-- ties by id. KEYS[3]: the user's sorted set (their live tokens: one per session).
-- ARGV[5..9]: now, the last use at or before which a session is idle ('' for none), the
-- cursor's login time and id ('' for the first page), how many to return at most.
-- Returns a flat list of id, login time, last use, address, User-Agent per session. It
-- reads the user's own tokens only, however many the others hold.
local now, idle = tonumber(ARGV[5]), tonumber(ARGV[6])
local after_at, after_id, limit = tonumber(ARGV[7]), ARGV[8], tonumber(ARGV[9])
-- byte order, as the other stores compare ids (Lua's own < follows Redis's locale)
local function before(a, b)
    for index = 1, math.min(#a, #b) do
        local x, y = string.byte(a, index), string.byte(b, index)
        if x ~= y then
            return x < y
        end
    end
    return #a < #b
end
local found = {}
for _, member in ipairs(redis.call('ZRANGE', KEYS[3], 0, -1)) do
    local r = redis.call('HMGET', token_prefix .. member, 'session', 'logged_in_at',
                         'last_used_at', 'address', 'user_agent', 'expires_at', 'retired_at')
    local at = tonumber(r[2])
    if r[1] and at and not r[7] and not (r[6] and tonumber(r[6]) <= now)
            and not (idle and r[3] and tonumber(r[3]) <= idle)
            and (not after_at or at < after_at or (at == after_at and before(after_id, r[1]))) then
        table.insert(found, {r[1], at, r[3], r[4] or '', r[5] or ''})
    end
end
table.sort(found, function(a, b)
    if a[2] ~= b[2] then
        return a[2] > b[2]
    end
    return before(a[1], b[1])
end)
local page = {}
for index = 1, math.min(limit, #found) do
    local s = found[index]
    table.insert(page, s[1])
    table.insert(page, tostring(s[2]))
    table.insert(page, s[3])
    table.insert(page, s[4])
    table.insert(page, s[5])
end
return page
