-- A reconcile under quotas (admitq.lua's admissions): as reconcilew.lua,
-- with an entry both of whose per-minute figures are Unlimited left alone
-- (an Unlimited figure comes as 0, its charge as the estimate: nothing
-- changes), the plan's gauges' slots released too, and calendar and
-- session buckets (quota.lua) charged in the admission's period: a delta
-- lands in the bucket's recorded period while the admission's instant is
-- within it and that period is still in force; else a debit still owed
-- (a positive delta) lands in the period in force now (a session opened
-- now if none is open) and a credit or a refund is dropped: a new period
-- starts full and never holds more. Concatenated after arith.lua,
-- entry.lua, (with leases leasebucket.lua,) one of wplain.lua or
-- wlease.lua, window.lua and quota.lua.
-- KEYS: as admitq.lua's (the entries, the gauges, LK and LW with leases,
-- the plan's two gauges, one entry per window bucket), last (optional)
-- the reconcile's identity record.
-- ARGV[1..13]: as reconcilew.lua; ARGV[14]: the admission's instant (µs,
-- a little-endian double), then the window buckets, one RQSPEC each (every
-- meter of a session window, those with no delta too, p0 naming its
-- window); with leases ARGV[15..20] (wlease.lua).
-- Returns 1 when applied, 0 when already applied under its identity, 2
-- when applied but for a calendar bucket whose period in force was not
-- among those passed (the caller's clock off by more than a period: that
-- charge is dropped, and counted by the caller).
local nw = (#ARGV[14] - 8) / 64
local base = 4
if LK then base = 6 end
local gbase = base + 2
local RID = KEYS[gbase + nw + 1]
if ARGV[13] == "1" then
  -- The slots go whether or not the reconcile was applied before.
  redis.call("ZREM", KEYS[3], ARGV[12])
  redis.call("ZREM", KEYS[4], ARGV[12])
  redis.call("ZREM", KEYS[base + 1], ARGV[12])
  redis.call("ZREM", KEYS[base + 2], ARGV[12])
end
if RID and not redis.call("SET", RID, "1", "NX", "PX", ARGV[11]) then return 0 end
--#include reconcileargs.lua
--#include adjustleased.lua
if wrr > 0 or wtr > 0 then
  local w, wls = rget(KEYS[2], LW, now, wrr, wtr)
  adjust(w, wa, 2 * wtr, wls[2], 2 * wrr, wls[1])
  rput(KEYS[2], w, wrr, wtr, wls, now)
end
if ARGV[9] ~= "1" and (krr > 0 or ktr > 0) then
  local k, kls = rget(KEYS[1], LK, now, krr, ktr)
  adjust(k, ka, 2 * ktr, kls[2], 2 * krr, kls[1])
  rput(KEYS[1], k, krr, ktr, kls, now)
end
local skewed = 0
local opened, closed = {}, {} -- session windows a late debit opened; session buckets found closed
local spec = ARGV[14]
local at = struct.unpack("<d", spec)
if at <= 0 then at = now end
for i = 1, nw do
  local f, p, d, q, p0, p1, p2, p3 = struct.unpack(RQSPEC, spec, i * 64 - 55)
  local key = KEYS[gbase + i]
  if q == 0 then
    -- A rolling bucket, as reconcilew.lua's: refilled at the figure of its
    -- latest admission (kept in it), then its level less the delta,
    -- floored at minus twice that figure by a debit and capped at it.
    local last, l, fr
    last, l, fr, f = wget(key, now, nil, p, f)
    l = l - d
    if d > 0 and l < -2 * f then l = -2 * f end
    if l >= f then l, fr = f, 0 end
    wput(key, last, l, fr, f, p)
  else
    local sp, s, e, open, stale = qget(key, q, now, p0, p1, p2, p3)
    if not sp then
      skewed = 1
    elseif open and at >= s and at < e then
      if d ~= 0 then qput(key, qcap(sp + d, f, d > 0), s, e, now) end
    elseif d > 0 then
      if q == 2 and not open then
        s, e = now, now + p
        opened[p0] = true
      end
      qput(key, qcap(sp + d, f, true), s, e, now)
    else
      if stale then qstale(key, q, s, e, now) end
      if q == 2 and not open then closed[#closed + 1] = i end
    end
  end
end
-- A late debit that opened a session opened it for every meter of its
-- window (p0 names the window): those with nothing to land open empty.
for _, i in ipairs(closed) do
  local _, p, _, _, g = struct.unpack(RQSPEC, spec, i * 64 - 55)
  if opened[g] then qput(KEYS[gbase + i], 0, now, now + p, now) end
end
return 1 + skewed
