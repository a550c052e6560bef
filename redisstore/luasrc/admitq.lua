-- An admission under quotas (llmrate.QuotaStore): an Unlimited per-minute
-- figure (sent as 0: that bucket is not read, checked, debited nor
-- written; an entry whose two figures are both Unlimited is not touched),
-- calendar and session windows (quota.lua), and the plan's windows and
-- gauges lent to a model entry's request (their buckets are simply more
-- window buckets, named by the default buckets' identity, and two more
-- gauges). Otherwise as admitw.lua, which admissions without any of these
-- still run, unchanged. Concatenated after arith.lua, admitone.lua, one of
-- xplain.lua or xlease.lua, window.lua and quota.lua.
-- KEYS[1]: the key's entry, KEYS[2]: the workspace's entry, KEYS[3] and
-- KEYS[4]: the key's and the workspace's gauges, then with leases the
-- key's and the workspace's lease hashes (LK, LW); then the plan's key
-- and workspace gauges (lent); then one entry per window bucket (ARGV[10]
-- lists them); last (optional) the admission's identity record. All in one
-- hash slot.
-- ARGV[1..9]: as admitw.lua (ARGV[4] -1: a peek, Peek: the levels as
-- found, nothing written); ARGV[10]: the window buckets, one QSPEC each,
-- in the order they are checked (the key's: the plan's windows, then the
-- entry's, in each requests, tokens, input, output; then the workspace's
-- likewise); ARGV[11]: the plan's key and workspace gauges' figures, as
-- "<dd" (0: none); ARGV[12] (optional, only with a priority reserve) the
-- floors as admitw.lua's ARGV[11], then the plan gauges' two floors.
-- Returns {allowed, refused, retry_us, never, kr, kt, wr, wt, wait_us,
-- the refusing window bucket (1-based; 0: none), now_us, 1 when a plan's
-- gauge refused, then each window bucket's level and reset (µs: a
-- calendar period's end, an open session's end, else 0)}; or {-1, now_us}
-- when a calendar bucket's period is not among those passed (the caller's
-- clock is off by more than a period: it fails open).
local nw = #ARGV[10] / 72
local base = 4
if LK then base = 6 end
local gbase = base + 2
local XID = KEYS[gbase + nw + 1]

--#include wait_us.lua

-- An admitted decision's identity record: its four levels, its wait in
-- µs, its time, then each window bucket's level and reset.
local XDEC = "<" .. string.rep("d", 6 + 2 * nw)
if XID then
  local v = redis.call("GET", XID)
  if v then
    local t = {struct.unpack(XDEC, v)}
    local out = {1, 0, 0, 0, t[1], t[2], t[3], t[4], t[5], 0, t[6], 0}
    for i = 1, 2 * nw do out[12 + i] = t[6 + i] end
    return out
  end
end

local now = now_us(ARGV[1])
local n, krr, ktr, wrr, wtr, s1 = struct.unpack(ADMIT, ARGV[2])
local solo = s1 == 1
local maxwait = tonumber(ARGV[4])
local kc, wc = tonumber(ARGV[5]), tonumber(ARGV[6])
local pkc, pwc = struct.unpack("<dd", ARGV[11])
local nin = tonumber(ARGV[9])
if solo then krr, ktr, wc = wrr, wtr, 0 end
-- The floors (ARGV[12]); 0 without a reserve.
local FL = ARGV[12]
local fkr, fkt, fwr, fwt, fkc, fwc, fpk, fpw = 0, 0, 0, 0, 0, 0, 0, 0
if FL then
  fkr, fkt, fwr, fwt = struct.unpack("<dddd", FL)
  fkc, fwc, fpk, fpw = struct.unpack("<dddd", FL, 33 + 8 * nw)
  maxwait = 0 -- no reservation with a reserve (admitw.lua)
end
-- An entry both of whose figures are Unlimited is not read nor written.
local kkey, wkey = KEYS[1], KEYS[2]
local kon, won = not solo and (krr > 0 or ktr > 0), wrr > 0 or wtr > 0
local wl, wr, wrf, wt, wtf = now, 0, 0, 0, 0
if won then wl, wr, wrf, wt, wtf = xget(wkey, LW, now, wrr, wtr) end
local kl, kr, krf, kt, ktf = wl, wr, wrf, wt, wtf
if solo then
  kon = false
elseif kon then
  kl, kr, krf, kt, ktf = xget(kkey, LK, now, krr, ktr)
else
  kl, kr, krf, kt, ktf = now, 0, 0, 0, 0
end

-- The window buckets: a rolling one refilled up to now, a calendar one in
-- its period in force, a session one open or unused. need is what it must
-- hold (one request, the estimate, the input estimate, 1 for an output
-- meter) and take what an admission debits (the output meter: nothing).
local code, fig, per, need, take, kind = {}, {}, {}, {}, {}, {}
local last, lv, fr = {}, {}, {}
local qs, qe, qopen, qold = {}, {}, {}, {}
local spec = ARGV[10]
for i = 1, nw do
  local c, m, f, p, q, p0, p1, p2, p3 = struct.unpack(QSPEC, spec, i * 72 - 71)
  code[i], fig[i], per[i], kind[i] = c, f, p, q
  if m == 0 then
    need[i], take[i] = 1, 1
  elseif m == 1 then
    need[i], take[i] = n, n
  elseif m == 2 then
    need[i], take[i] = nin, nin
  else
    need[i], take[i] = 1, 0
  end
  if q == 0 then
    last[i], lv[i], fr[i] = wget(KEYS[gbase + i], now, f, p)
  else
    local sp, s, e, open, stale = qget(KEYS[gbase + i], q, now, p0, p1, p2, p3)
    if not sp then return {-1, now} end
    last[i], lv[i], fr[i] = sp, f - sp, 0
    qs[i], qe[i], qopen[i], qold[i] = s, e, open, stale
  end
end
if FL then
  for i = 1, nw do need[i] = need[i] + struct.unpack("<d", FL, 25 + 8 * i) end
end

if maxwait < 0 then
  -- A peek (Peek): the levels as found, nothing written, nothing taken.
  local out = {0, 0, 0, 0, kr, kt, wr, wt, 0, 0, now, 0}
  if krr <= 0 then out[5] = 0 end
  if ktr <= 0 then out[6] = 0 end
  if wrr <= 0 then out[7] = 0 end
  if wtr <= 0 then out[8] = 0 end
  for i = 1, nw do
    out[11 + 2 * i], out[12 + 2 * i] = lv[i], qe[i] or 0
  end
  return out
end

local refused, rwin = -1, 0
if krr > 0 and kr < 1 + fkr then
  refused = 0
elseif ktr > 0 and kt < n + fkt then
  refused = 1
elseif wrr > 0 and wr < 1 + fwr then
  refused = 2
elseif wtr > 0 and wt < n + fwt then
  refused = 3
else
  for i = 1, nw do
    if lv[i] < need[i] then
      refused, rwin = code[i], i
      break
    end
  end
end
local retry, never, wait = 0, 0, 0
if refused >= 0 then
  -- Every bucket's wait: the longest, exact, decides a reservation; the
  -- longest capped (a per-minute bucket's at 60 s, a rolling window's at
  -- the longer of 60 s and its window, a calendar or session window's
  -- not at all: its end) is the Retry-After. A calendar or session bucket
  -- without room now never gives a reservation (its room comes at a
  -- period's start or a session's end, which a reservation debited now
  -- would not land in): such a request is refused, told that wait.
  local capped, qshort = 0, false
  local function tk(cap, s, nv)
    if s > retry then retry = s end
    if nv then never = 1 end
    if s > cap then s = cap end
    if s > capped then capped = s end
  end
  if krr > 0 then tk(60000000, wait_us(kr, krf, 1 + fkr, krr, 2 * krr)) end
  if ktr > 0 then tk(60000000, wait_us(kt, ktf, n + fkt, ktr, 2 * ktr)) end
  if wrr > 0 then tk(60000000, wait_us(wr, wrf, 1 + fwr, wrr, 2 * wrr)) end
  if wtr > 0 then tk(60000000, wait_us(wt, wtf, n + fwt, wtr, 2 * wtr)) end
  local qend = nil -- the first end of a calendar period or session spent
  for i = 1, nw do
    local e = qe[i]
    if kind[i] == 2 and not qopen[i] then e = now + per[i] end
    if kind[i] ~= 0 and e and e > 0 and (qend == nil or e < qend) then qend = e end
    if kind[i] == 0 then
      tk(math.max(60000000, per[i]), wwait_us(lv[i], fr[i], need[i], fig[i], per[i]))
    elseif need[i] > fig[i] then
      tk(0, 0, true) -- never fits: no wait to tell (as the memory store)
    elseif lv[i] < need[i] then
      qshort = true
      tk(e - now, e - now, false)
    end
  end
  -- Nor one that would run at or past such an end: debited in the period
  -- it waits in, it would run in the next, which starts full.
  if maxwait > 0 and never == 0 and not qshort and retry <= maxwait and (qend == nil or now + retry < qend) then
    refused, rwin, wait, retry = -1, 0, retry, 0 -- a reservation
  else
    retry = capped
  end
end

-- The gauges, after every bucket: the key's (the plan's, then the
-- entry's), then the workspace's (likewise).
local srv, pg = 0, 0
if refused < 0 and (kc > 0 or wc > 0 or pkc > 0 or pwc > 0) then
  local t = redis.call("TIME")
  srv = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local held, gf = 0, 0
  local function gauge(key, f, fl, b, lent)
    if refused >= 0 or f <= 0 then return end
    redis.call("ZREMRANGEBYSCORE", key, "-inf", srv)
    held = redis.call("ZCARD", key)
    if held >= f - fl then refused, gf, pg = b, f, lent end
  end
  gauge(KEYS[base + 1], pkc, fpk, 4, 1)
  gauge(KEYS[3], kc, fkc, 4, 0)
  gauge(KEYS[base + 2], pwc, fpw, 5, 1)
  gauge(KEYS[4], wc, fwc, 5, 0)
  if refused >= 0 then
    retry, wait = math.max(wait, 1000000), 0
    if FL and held < gf then never = never + 2 end
  end
elseif refused >= 0 and FL then
  -- ByReserve: the refusing bucket had room for the request itself.
  local room
  if rwin > 0 then
    room = lv[rwin] >= need[rwin] - struct.unpack("<d", FL, 25 + 8 * rwin)
  elseif refused == 0 then
    room = kr >= 1
  elseif refused == 1 then
    room = kt >= n
  elseif refused == 2 then
    room = wr >= 1
  else
    room = wt >= n
  end
  if room then never = never + 2 end
end

local out = {0, refused, retry, never, 0, 0, 0, 0, 0, rwin, now, pg}
if refused < 0 then
  out[1], out[2] = 1, 0
  -- The debit, of the per-minute buckets that exist (a solo request's key
  -- and workspace are one entry, debited once).
  if krr > 0 then kr = kr - 1 end
  if ktr > 0 then kt = kt - n end
  if not solo then
    if wrr > 0 then wr = wr - 1 end
    if wtr > 0 then wt = wt - n end
  else
    wr, wt = kr, kt
  end
  for i = 1, nw do
    lv[i] = lv[i] - take[i]
    if kind[i] == 2 and not qopen[i] then qs[i], qe[i] = now, now + per[i] end
  end
end
-- Entries are written back, admitted or not (a refused one advanced to
-- now, so that the latest time seen is kept), each to live until time
-- alone has refilled it; a quota entry only when it changed (a debit, a
-- session opened).
if kon then xput(kkey, kl, kr, krf, kt, ktf, krr, ktr, now) end
if won then xput(wkey, wl, wr, wrf, wt, wtf, wrr, wtr, now) end
for i = 1, nw do
  local key = KEYS[gbase + i]
  if kind[i] == 0 then
    wput(key, last[i], lv[i], fr[i], fig[i], per[i])
    out[12 + 2 * i] = 0
  else
    if refused < 0 and (take[i] > 0 or kind[i] == 2 and not qopen[i]) then
      qput(key, fig[i] - lv[i], qs[i], qe[i], now)
    elseif qold[i] then
      qstale(key, kind[i], qs[i], qe[i], now)
    end
    out[12 + 2 * i] = qe[i]
  end
  out[11 + 2 * i] = lv[i]
end
if krr <= 0 then kr = 0 end
if ktr <= 0 then kt = 0 end
if wrr <= 0 then wr = 0 end
if wtr <= 0 then wt = 0 end
out[5], out[6], out[7], out[8], out[9] = kr, kt, wr, wt, wait
if refused >= 0 then return out end

if srv > 0 then
  -- Each gauge lives as long as its latest slot (as admitx.lua).
  local life = tonumber(ARGV[7])
  local exp = srv + life * 1000
  local function slot(key, f)
    if f <= 0 then return end
    redis.call("ZADD", key, exp, ARGV[8])
    redis.call("PEXPIRE", key, life + 1000)
  end
  slot(KEYS[3], kc)
  slot(KEYS[4], wc)
  slot(KEYS[base + 1], pkc)
  slot(KEYS[base + 2], pwc)
end
if XID then
  local rec = {kr, kt, wr, wt, wait, now}
  for i = 1, 2 * nw do rec[6 + i] = out[12 + i] end
  redis.call("SET", XID, struct.pack(XDEC, unpack(rec)), "PX", ARGV[3])
end
return out
