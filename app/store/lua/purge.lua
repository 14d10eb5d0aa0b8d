-- ARGV[4]: now, ARGV[5]: the most to purge. Returns how many expired tokens it forgot.
return purge(ARGV[4], tonumber(ARGV[5]))
