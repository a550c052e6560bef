-- A batch of admissions, each atomic and all in one script call, in order
-- (a later one sees what an earlier one debited). Request i uses
-- KEYS[3i-2] (key entry), KEYS[3i-1] (workspace entry), KEYS[3i] (its
-- identity record, "" for none: a batch runs on one node only) and
-- ARGV[i + 2] (admit_one's ADMIT).
-- ARGV[1]: now_us ("" = server TIME, read once for the whole batch),
-- ARGV[2]: the identity records' life in ms.
-- Returns the 8 results of every request, concatenated.
local now = now_us(ARGV[1])
local out = {}
for i = 1, #KEYS / 3 do
  local r = admit_id(KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i], now, ARGV[i + 2], ARGV[2])
  for j = 1, 8 do out[#out + 1] = r[j] end
end
return out
