-- KEYS[3]: the user key. Returns how many tokens were forgotten.
local forgotten = 0
for _, digest in ipairs(redis.call('ZRANGE', KEYS[3], 0, -1)) do
    forgotten = forgotten + forget(digest)
end
redis.call('DEL', KEYS[3])
return forgotten
