-- KEYS: due, dueinfo. ARGV: member, claim.
return ack(KEYS[1], KEYS[2], ARGV[1], ARGV[2])
