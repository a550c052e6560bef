-- LIMIT is the longest wait computed, in µs: just past MaxRetryAfter (60
-- s), so that a wait longer than any MaxWait is told from one of 60 s.
local LIMIT = 61000000

-- wait_us returns the exact µs (rounded up, at most LIMIT) until the bucket
-- holds n, and whether n can never fit: ceil((d*M - frac) / rate) for a
-- deficit of d, computed in three exact steps (60d, then two factors of
-- 1000), every intermediate below 2^53.
local function wait_us(level, frac, n, rate, cap)
  if n > cap then return LIMIT, true end
  if level >= n then return 0, false end
  local d = n - level
  if d > rate then return LIMIT, false end
  local qa, ra = divmod(60 * d, rate)
  local qb, rb = divmod(ra * 1000, rate)
  local qc, rc = divmod(rb * 1000 - frac, rate)
  local w = qa * 1000000 + qb * 1000 + qc
  if rc > 0 then w = w + 1 end
  if w > LIMIT then w = LIMIT end
  return w, false
end
