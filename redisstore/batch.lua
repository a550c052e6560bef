-- A batch of admissions, each atomic and all in one script call, in order
-- (a later one sees what an earlier one debited). Request i uses
-- KEYS[2i-1], KEYS[2i] and ARGV[i + 1] (admit_one's ADMIT).
-- ARGV[1]: now_us ("" = server TIME, read once for the whole batch).
-- Returns the 8 results of every request, concatenated.
local now = now_us(ARGV[1])
local out = {}
for i = 1, #KEYS / 2 do
  local r = admit_one(KEYS[2 * i - 1], KEYS[2 * i], now, ARGV[i + 1])
  for j = 1, 8 do out[#out + 1] = r[j] end
end
return out
