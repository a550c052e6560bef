-- Shared by every script (concatenated in front of them): the exact bucket
-- arithmetic, the clock and the entry format.
--
-- Exact integer token buckets in Lua 5.1, whose numbers are doubles: every
-- intermediate value below stays under 2^53, so all arithmetic is exact.
-- Time is in microseconds; a bucket's fraction is in 1/M units, M = one
-- minute in microseconds, exactly as the memory store does in nanoseconds.
local M = 60000000
local LIMB = 1048576 -- 2^20

local function divmod(a, b)
  local q = math.floor(a / b)
  local r = a - q * b
  if r < 0 then
    q = q - 1
    r = r + b
  elseif r >= b then
    q = q + 1
    r = r - b
  end
  return q, r
end

-- refill returns level, frac after dt microseconds at rate units per minute,
-- capped at cap: level + floor((rate*dt + frac) / M), the remainder as the
-- new frac. rate <= 1e12, b < M, so rh*b, xr*LIMB and rl*b are < 2^47.
local function refill(level, frac, rate, cap, dt)
  if level >= cap then return cap, 0 end
  if dt <= 0 then return level, frac end
  local need = cap - level
  if dt >= (math.floor(need / rate) + 1) * M then return cap, 0 end
  -- The common case: rate*dt below 2^52, so rate*dt + frac (frac < M) is
  -- an exact double, and one division gives what the limbs below give.
  -- (A product at or past 2^52 rounds to at least 2^52: the test is safe.)
  local p = rate * dt
  if p < 4503599627370496 then
    local add, tr = divmod(p + frac, M)
    if add >= need then return cap, 0 end
    return level + add, tr
  end
  local a, b = divmod(dt, M)
  local rh, rl = divmod(rate, LIMB)
  local xq, xr = divmod(rh * b, M)
  local tq, tr = divmod(xr * LIMB + rl * b + frac, M)
  local add = rate * a + xq * LIMB + tq
  if add >= need then return cap, 0 end
  return level + add, tr
end

-- wait returns the whole seconds (rounded up, at most 60) until the bucket
-- holds n, and whether n can never fit.
local function wait(level, frac, n, rate, cap)
  if n > cap then return 60, true end
  if level >= n then return 0, false end
  local d = n - level
  if d > rate then return 60, false end
  -- ceil((d*M - frac) / (rate * 1e6)) = ceil((60d - frac/1e6) / rate)
  local fq, fr = divmod(frac, 1000000)
  local B = 60 * d - fq
  if fr == 0 then
    local q, r = divmod(B, rate)
    if r > 0 then q = q + 1 end
    return q, false
  end
  local q = divmod(B - 1, rate)
  return q + 1, false
end

-- MAXPX is the longest expiry set, in ms (about 3,170 years): Redis reads
-- a number Lua hands it only in plain digits, which it gets below 1e17,
-- and a debt run up under large figures can take longer than that to
-- refill under small ones.
local MAXPX = 1e14

-- ttl returns milliseconds until time alone refills the bucket to full, with
-- a one-second margin, so a key never expires while it still owes (at most
-- MAXPX).
local function ttl(level, rate, cap)
  if level >= cap then return 1000 end
  return math.min(math.ceil((cap - level) * 60000 / rate) + 1000, MAXPX)
end

local function now_us(arg)
  if arg ~= "" then return tonumber(arg) end
  local t = redis.call("TIME")
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- An entry is one string: five little-endian doubles (last, rl, rf, tl,
-- tf), all integers below 2^53 and so exact. One GET and one SET (with PX)
-- per entry keep an admission to five commands at most (TIME, and a GET
-- and a SET for each of its one or two entries).
local FMT = "<ddddd"

