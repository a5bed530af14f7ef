-- KEYS: due, dueinfo, then the hashes of the entry's requests.
-- ARGV: member, claim, field, reqs.
-- Removes a taken entry without a run: its requests are answered
-- ANSWER_DROPPED.
local n = ack(KEYS[1], KEYS[2], ARGV[1], ARGV[2])
if n == 1 then answer(3, ARGV[4], ARGV[3], ANSWER_DROPPED) end
return n
