-- ARGV[5]: now, ARGV[6]: the most to purge. Returns how many expired tokens it forgot.
return purge(ARGV[5], tonumber(ARGV[6]))
