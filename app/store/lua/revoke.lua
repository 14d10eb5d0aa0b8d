-- ARGV[4]: the digest. Returns 1 if the token was known, else 0.
return forget(ARGV[4])
