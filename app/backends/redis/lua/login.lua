-- A login under SPEC.md's defaults (no lifetime, no per-user limit): the token's hash and
-- its two index entries, in one script, so one command and one reply. KEYS: the token's
-- hash, the user's sorted set, the digests' sorted set, the cut-offs' sorted set. ARGV:
-- username, issued_at (s), the user score (the microsecond of issue), the digest, the
-- session's id, its last use (issued_at to the minute), address and User-Agent. Nothing
-- is evicted, so the microsecond alone orders the user's listing. Returns the user's
-- cut-off, or nil.
redis.call('HSET', KEYS[1], 'username', ARGV[1], 'issued_at', ARGV[2], 'session', ARGV[5],
           'logged_in_at', ARGV[2], 'last_used_at', ARGV[6], 'address', ARGV[7],
           'user_agent', ARGV[8])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[4])
redis.call('ZADD', KEYS[3], 0, ARGV[4])
return redis.call('ZSCORE', KEYS[4], ARGV[1])
