-- KEYS: due, dueinfo, then the hashes of the entry's requests.
-- ARGV (scripts.go's ackArgs): member, claim, field, reqs.
-- Removes a taken entry without a run: its requests are answered
-- ANSWER_DROPPED.
local n = ack(KEYS[1], KEYS[2], ARGV[A_MEMBER], ARGV[A_CLAIM])
if n == 1 then answer(3, ARGV[A_REQS], ARGV[A_FIELD], ANSWER_DROPPED) end
return n
