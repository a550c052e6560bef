-- Window buckets (llmrate.Limits Windows), shared by admitw.lua and
-- reconcilew.lua (concatenated after arith.lua). A window bucket of figure
-- F over a window of P µs holds at most F (no burst) and refills F per P,
-- continuously: its fraction is in 1/P units, as a per-minute bucket's is
-- in 1/M units. P is at most 744 h (2.6784e12 µs, below 2^42) and F at
-- most 1e12 (below 2^40), so a product F × P cannot be formed in a double:
-- muldiv forms such quotients exactly in nine-bit steps.

-- An entry is four little-endian doubles: last (µs), level, frac and
-- the figure of its latest admission (a store keeps levels; a reconcile
-- refills at this figure, not at its own, maybe stale). An entry of three
-- (written before the figure was kept) has none: the caller's stands in.
local WFMT = "<dddd"

-- muldiv returns floor((x*y + c) / d) and its remainder, exactly, for
-- integers 0 <= x < 2^43, 0 <= y < 2^54, 0 <= c < 2^52 and 0 < d < 2^43,
-- when the quotient is below 2^53: y is taken nine bits at a time from the
-- top, so each partial sum r*512 + x*chunk (r < d) stays below 2^53.
local function muldiv(x, y, c, d)
  local q, r, s = 0, 0, 18014398509481984 -- 2^54
  for _ = 1, 6 do
    s = s / 512
    local ch = math.floor(y / s)
    y = y - ch * s
    local a, b = divmod(r * 512 + x * ch, d)
    q, r = q * 512 + a, b
  end
  local a, b = divmod(r + c, d)
  return q + a, b
end

-- wrefill returns level, frac after dt µs of a bucket of figure f over p
-- µs: level + floor((f*dt + frac) / p), the remainder as the new frac,
-- capped at f (a level above f, the figure lowered since, is clamped).
local function wrefill(level, frac, f, p, dt)
  if level >= f then return f, 0 end
  if dt <= 0 then return level, frac end
  local need = f - level
  local x = f * dt
  local add, r
  if x < 4503599627370496 then
    -- f*dt + frac (frac < p < 2^42) is an exact double: one division. (A
    -- product at or past 2^52 rounds to at least 2^52: the test is safe.)
    add, r = divmod(x + frac, p)
  else
    if dt >= (math.floor(need / f) + 1) * p then return f, 0 end
    local a, b = divmod(dt, p)
    add, r = muldiv(f, b, frac, p)
    add = add + f * a
  end
  if add >= need then return f, 0 end
  return level + add, r
end

-- wwait_us returns the exact µs (rounded up) until the bucket holds k,
-- and whether k can never fit (k above the figure; the wait is then p
-- plus 61 s, longer than any cap): ceil((d*p - frac) / f) for a deficit
-- of d, formed as ((d-1)*p + (p - frac)) / f.
local function wwait_us(level, frac, k, f, p)
  if k > f then return p + 61000000, true end
  if level >= k then return 0, false end
  local q, r = muldiv(p, k - level - 1, p - frac, f)
  if r > 0 then q = q + 1 end
  return q, false
end

-- wget returns the window entry at key refilled up to now at figure f
-- (nil: at its own, for a reconcile) as last, level, frac and the figure
-- it was refilled at: created full at now (at f, or dflt for a
-- reconcile) when absent; its time moved to now, or kept when the clock
-- went backwards, which refills nothing. An entry that time alone has
-- refilled to full at its own figure is as if absent (full again at f,
-- or dflt), whether or not it has expired yet (it expires a second or
-- so later): the memory store forgets such a bucket the same way.
local function wget(key, now, f, p, dflt)
  local v = redis.call("GET", key)
  if not v then
    f = f or dflt
    return now, f, 0, f
  end
  local last, l, fr, sf
  if #v < 32 then
    last, l, fr = struct.unpack("<ddd", v)
    sf = dflt or f
  else
    last, l, fr, sf = struct.unpack(WFMT, v)
  end
  local dt = now - last
  if dt > 0 then last = now end
  local ol, ofr = wrefill(l, fr, sf, p, dt)
  if ol >= sf then
    f = f or dflt
    return last, f, 0, f
  end
  if not f then return last, ol, ofr, sf end
  l, fr = wrefill(l, fr, f, p, dt)
  return last, l, fr, f
end

-- wput writes a window entry back with its figure f, to expire once time
-- alone would have refilled it to full, plus a second (at most MAXPX): (f - level) × p / f
-- µs. Its double rounding errs by far less than a millisecond (relative
-- 2^-52 on under 10^13 ms), which the second's margin covers: an entry
-- never expires while it still owes.
local function wput(key, last, l, fr, f, p)
  local px = 1000
  if l < f then px = math.min(math.ceil((f - l) * (p / 1000) / f) + 1000, MAXPX) end
  redis.call("SET", key, struct.pack(WFMT, last, l, fr, f), "PX", px)
end

-- WSPEC is one window bucket of an admission (admitw.lua): the Bucket
-- that names it in a refusal, its meter (0 requests, 1 tokens, 2 input, 3
-- output), its figure and its window in µs. A reconcile's (reconcilew.lua)
-- is RSPEC: figure, window in µs, and the delta to subtract from its level
-- (llmrate.ReconcileRequest.WindowDelta).
local WSPEC = "<dddd"
local RSPEC = "<ddd"
