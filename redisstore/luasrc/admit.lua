-- One admission in a call of its own: the store's default call, so it
-- stands alone, written for what the server spends on it. Redis runs the
-- whole body on every call, so nothing is defined that the call may not
-- use: one function (refill) on every call, wait only on a refusal; no
-- tables but the ones Redis builds; the reply one binary string, the very
-- string the identity record keeps. The arithmetic is arith.lua's (the
-- other scripts share it from there); admitone.lua's admit_id is the same
-- decision for a batch.
--
-- KEYS[1]: the workspace's entry; unless solo, KEYS[2]: the key's entry;
-- then (optional) the admission's identity record: KEYS[2] when solo,
-- else KEYS[3]. All in one hash slot.
-- ARGV[1]: the request, eight little-endian doubles: admitone.lua's
-- ADMIT (tokens, key rpm, key tpm, ws rpm, ws tpm, solo), then now_us (NaN:
-- server TIME) and the identity record's life in ms. (One argument: each
-- one more costs the server about 1,500 instructions.)
-- Returns little-endian doubles: admitted, the four levels (kr, kt, wr,
-- wt: 32 bytes); refused, the first bucket refused, the longest wait in
-- whole seconds, never (1: can never fit) and the four levels (56 bytes).
-- An admission already admitted under its identity gets that first reply
-- and debits nothing; a refused one is not recorded (it debited nothing).
local n, krr, ktr, wrr, wtr, solo, now, life = struct.unpack("<dddddddd", ARGV[1])
solo = solo == 1
local wkey, kkey, idkey = KEYS[1], KEYS[2], KEYS[3]
if solo then kkey, idkey = wkey, KEYS[2] end
if idkey then
  local v = redis.call("GET", idkey)
  if v then return v end
end
local timed = now ~= now -- NaN: the server's TIME, the clock of its expiries
if timed then
  local t = redis.call("TIME")
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local M = 60000000
local floor = math.floor

-- refill returns level, frac after dt microseconds at rate units per
-- minute, capped at cap: level + floor((rate*dt + frac) / M), the
-- remainder as the new frac (arith.lua's refill, exact below 2^53).
local function refill(level, frac, rate, cap, dt)
  if level >= cap then return cap, 0 end
  if dt <= 0 then return level, frac end
  local need = cap - level
  local p = rate * dt
  local add, r
  if p < 4503599627370496 then
    -- rate*dt + frac is an exact double: one division, corrected. (A
    -- product at or past 2^52 rounds to at least 2^52: the test is safe.)
    p = p + frac
    add = floor(p / M)
    r = p - add * M
    if r < 0 then add, r = add - 1, r + M elseif r >= M then add, r = add + 1, r - M end
  elseif dt >= (floor(need / rate) + 1) * M then
    return cap, 0
  else
    local function divmod(a, b)
      local q = floor(a / b)
      local m = a - q * b
      if m < 0 then return q - 1, m + b elseif m >= b then return q + 1, m - b end
      return q, m
    end
    local a, b = divmod(dt, M)
    local rh, rl = divmod(rate, 1048576)
    local xq, xr = divmod(rh * b, M)
    local tq, tr = divmod(xr * 1048576 + rl * b + frac, M)
    add, r = rate * a + xq * 1048576 + tq, tr
  end
  if add >= need then return cap, 0 end
  return level + add, r
end

-- The workspace's entry (last, rl, rf, tl, tf, and exp when this script
-- wrote it on the server's TIME), created full at now when absent, its
-- time moved to now, or kept when the clock went backwards, which refills
-- nothing; then the key's, unless solo (one entry for both).
local wl, wr, wrf, wt, wtf, wexp, kexp
local v = redis.call("GET", wkey)
--#include entryget.lua
local kl, kr, krf, kt, ktf = wl, wr, wrf, wt, wtf
if not solo then
  v = redis.call("GET", kkey)
  --#include entryget.lua wkey=kkey wl=kl wr=kr wrf=krf wt=kt wtf=ktf wexp=kexp wrr=krr wtr=ktr
end

--#include cascade.lua
if refused < 0 then
  --#include debit.lua
end

-- Entries are written back, admitted or not (a refused one advanced to
-- now, so that the latest time seen is kept: a clock that then steps back
-- refills nothing, exactly as the memory store keeps it), each to live at
-- least until time alone would have refilled it to full, with a second's
-- margin (arith.lua's ttl). On the server's TIME an entry records when its
-- expiry falls (exp, in µs of that clock: its expiry falls no earlier), and
-- while that is late enough the write keeps it (KEEPTTL: half what a new
-- expiry costs the server); else the expiry is set EXTRA ms later than
-- needed, so that a busy entry sets one about every EXTRA ms. On a clock
-- of the caller's, an entry is written as the other scripts write it,
-- without exp, its expiry set as needed.
local EXTRA = 10000
local MAXPX = 1e14 -- as arith.lua's: about 3,170 years, in plain digits
local px, q = 1000, 0
--#include entryput.lua
if not solo then
  px = 1000
  --#include entryput.lua wkey=kkey wl=kl wr=kr wrf=krf wt=kt wtf=ktf wexp=kexp wrr=krr wtr=ktr
end
if refused < 0 then
  local rep = struct.pack("<dddd", kr, kt, wr, wt)
  if idkey then redis.call("SET", idkey, rep, "PX", life) end
  return rep
end

-- wait returns the whole seconds (rounded up, at most 60) until a bucket
-- holds k, and whether k can never fit (arith.lua's wait).
local function wait(level, frac, k, rate, cap)
  if k > cap then return 60, true end
  if level >= k then return 0, false end
  local d = k - level
  if d > rate then return 60, false end
  local fq = floor(frac / 1000000)
  local fr = frac - fq * 1000000
  if fr < 0 then fq, fr = fq - 1, fr + 1000000 elseif fr >= 1000000 then fq, fr = fq + 1, fr - 1000000 end
  local B = 60 * d - fq
  if fr ~= 0 then B = B - 1 end
  local w = floor(B / rate)
  local m = B - w * rate
  if m < 0 then w, m = w - 1, m + rate elseif m >= rate then w, m = w + 1, m - rate end
  if fr ~= 0 or m > 0 then w = w + 1 end
  return w, false
end
--#include waits.lua
return struct.pack("<ddddddd", refused, retry, never, kr, kt, wr, wt)
