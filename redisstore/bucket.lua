-- Shared by admit.lua and reconcile.lua (concatenated in front of them).
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
-- capped at cap. rate <= 1e12, b < M, so rh*b, xr*LIMB and rl*b are < 2^47.
local function refill(level, frac, rate, cap, dt)
  if level >= cap then return cap, 0 end
  if dt <= 0 then return level, frac end
  local need = cap - level
  if dt >= (math.floor(need / rate) + 1) * M then return cap, 0 end
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

-- ttl returns milliseconds until time alone refills the bucket to full, with
-- a one-second margin, so a key never expires while it still owes.
local function ttl(level, rate, cap)
  if level >= cap then return 1000 end
  return math.ceil((cap - level) * 60000 / rate) + 1000
end

local function now_us(arg)
  if arg ~= "" then return tonumber(arg) end
  local t = redis.call("TIME")
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- An entry is one string: five little-endian doubles (last, rl, rf, tl,
-- tf), all integers below 2^53 and so exact. One GET and one SET (with PX)
-- per entry keep the script to four commands.
local FMT = "<ddddd"

-- fetch returns the entry {last, rl, rf, tl, tf} at key, created full at
-- now when absent, its time moved to now, and the time to refill it for: 0
-- when the clock went backwards, which refills nothing.
local function fetch(key, now, rrate, trate)
  local v = redis.call("GET", key)
  local e
  if v then
    local a, b, c, d, f = struct.unpack(FMT, v)
    e = {a, b, c, d, f}
  else
    e = {now, 2 * rrate, 0, 2 * trate, 0}
  end
  local dt = now - e[1]
  if dt > 0 then e[1] = now else dt = 0 end
  return e, dt
end

-- load returns the entry at key (fetch), refilled up to now.
local function load(key, now, rrate, trate)
  local e, dt = fetch(key, now, rrate, trate)
  e[2], e[3] = refill(e[2], e[3], rrate, 2 * rrate, dt)
  e[4], e[5] = refill(e[4], e[5], trate, 2 * trate, dt)
  return e
end

-- entry_ttl is how long, in ms, entry e takes to refill to full by time
-- alone: past it, a missing entry (created full) is the same entry.
local function entry_ttl(e, rrate, trate)
  return math.max(ttl(e[2], rrate, 2 * rrate), ttl(e[4], trate, 2 * trate))
end

local function store(key, e, rrate, trate)
  local px = entry_ttl(e, rrate, trate)
  redis.call("SET", key, struct.pack(FMT, e[1], e[2], e[3], e[4], e[5]), "PX", px)
end

-- first_refused returns the first bucket, in admission order (0 key
-- requests, 1 key tokens, 2 workspace requests, 3 workspace tokens), without
-- room for one request and n tokens; -1 when all four have room. Written
-- out, not looped over a table of tables: this is the hot path of every
-- admission.
local function first_refused(k, w, n)
  if k[2] < 1 then
    return 0
  elseif k[4] < n then
    return 1
  elseif w[2] < 1 then
    return 2
  elseif w[4] < n then
    return 3
  end
  return -1
end

-- longest_wait is a refused request's wait, in whole seconds, and never
-- (1 when it can never fit): the longest of its four buckets' waits for one
-- request and n tokens.
local function longest_wait(k, w, n, krr, ktr, wrr, wtr)
  local retry, never = 0, 0
  local function take(s, nv)
    if s > retry then retry = s end
    if nv then never = 1 end
  end
  take(wait(k[2], k[3], 1, krr, 2 * krr))
  take(wait(k[4], k[5], n, ktr, 2 * ktr))
  take(wait(w[2], w[3], 1, wrr, 2 * wrr))
  take(wait(w[4], w[5], n, wtr, 2 * wtr))
  return retry, never
end

-- admit_one checks and debits one request's four buckets, all or nothing.
-- Its arguments are a[o .. o+5]: tokens, key rpm, key tpm, ws rpm, ws tpm,
-- solo ("1": the key is its own workspace; its buckets are kept once, in
-- wkey, and kkey is not touched).
-- Returns {allowed, refused, retry_s, never, kr, kt, wr, wt}.
local function admit_one(kkey, wkey, now, a, o)
  local n = tonumber(a[o])
  local krr, ktr, wrr, wtr = tonumber(a[o + 1]), tonumber(a[o + 2]), tonumber(a[o + 3]), tonumber(a[o + 4])
  local solo = a[o + 5] == "1"
  local w = load(wkey, now, wrr, wtr)
  local k = w
  if not solo then k = load(kkey, now, krr, ktr) end
  local refused = first_refused(k, w, n)
  if refused < 0 then
    k[2] = k[2] - 1
    k[4] = k[4] - n
    if not solo then -- solo: k and w are one entry, debited once
      w[2] = w[2] - 1
      w[4] = w[4] - n
      store(kkey, k, krr, ktr)
    end
    store(wkey, w, wrr, wtr)
    return {1, 0, 0, 0, k[2], k[4], w[2], w[4]}
  end
  -- Refused: nothing is debited, but the entries are written back advanced
  -- to now, so that the latest time seen is kept (a clock that then steps
  -- back refills nothing), exactly as the memory store keeps it.
  if not solo then store(kkey, k, krr, ktr) end
  store(wkey, w, wrr, wtr)
  local retry, never = longest_wait(k, w, n, krr, ktr, wrr, wtr)
  return {0, refused, retry, never, k[2], k[4], w[2], w[4]}
end
