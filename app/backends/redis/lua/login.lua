-- A login under SPEC.md's defaults (no lifetime, no per-user limit): the token's hash and
-- its two index entries, in one script, so one command and one reply. KEYS: the token's
-- hash, the user's sorted set, the digests' sorted set. ARGV: username, issued_at (s),
-- the user score (the microsecond of issue), the digest. Nothing is evicted, so the
-- microsecond alone orders the user's listing.
redis.call('HSET', KEYS[1], 'username', ARGV[1], 'issued_at', ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[4])
redis.call('ZADD', KEYS[3], 0, ARGV[4])
return 1
