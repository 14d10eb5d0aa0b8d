-- KEYS: counters to take one hit back from; a counter that is gone (its window ended)
-- or at 0 is left alone, and DECR keeps a key's expiry.
for _, key in ipairs(KEYS) do
    local hits = tonumber(redis.call('GET', key))
    if hits and hits > 0 then
        redis.call('DECR', key)
    end
end
return 0
