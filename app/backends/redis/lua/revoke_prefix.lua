-- ARGV[5]: a lowercase hex prefix. Forgets the one token it matches; returns 1 or 0.
local prefix = ARGV[5]
local found = redis.call('ZRANGEBYLEX', digests_key, '[' .. prefix, '(' .. prefix .. 'g',
                         'LIMIT', 0, 2)
if #found ~= 1 then
    return 0
end
return (forget(found[1]))  -- whether it was known, only
