-- KEYS: one counter per limit; ARGV: each one's window in milliseconds. Returns, for
-- each, its hits after this one and the milliseconds left in its window.
local answer = {}
for i, key in ipairs(KEYS) do
    local hits = redis.call('INCR', key)
    local left = redis.call('PTTL', key)
    if left < 0 then  -- a new window (or a key that lost its expiry): it starts now
        left = tonumber(ARGV[i])
        redis.call('PEXPIRE', key, left)
    end
    answer[2 * i - 1] = hits
    answer[2 * i] = left
end
return answer
