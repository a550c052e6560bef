-- A reconcile whose figures carry windows (llmrate.Limits Windows): the
-- per-minute tokens charge (as reconcile.lua, or leasereconcile.lua's
-- bound with leases) and every window bucket's charge in one atomic step,
-- applied at most once, releasing the admission's slots in the same call.
-- Concatenated after arith.lua, entry.lua, (with leases leasebucket.lua,)
-- one of wplain.lua or wlease.lua (they define rget, rput, LK and LW) and
-- window.lua. Reconciles without windows never run it.
-- KEYS[1]: the key's entry, KEYS[2]: the workspace's, KEYS[3] and KEYS[4]:
-- the key's and the workspace's gauges, then with leases LK and LW; then
-- one entry per window bucket (ARGV[14] lists them); last (optional) the
-- reconcile's identity record.
-- ARGV[1..11]: as reconcile.lua; ARGV[12]: the admission's ID, ARGV[13]:
-- "1" to release its slots; ARGV[14]: the window buckets, one RSPEC each;
-- with leases, ARGV[15..20] (wlease.lua).
-- Returns 1 when applied, 0 when already applied under its identity.
local nw = #ARGV[14] / 24
local base = 4
if LK then base = 6 end
local RID = KEYS[base + nw + 1]
if ARGV[13] == "1" then
  -- The slots go whether or not the reconcile was applied before (as
  -- release.lua): removing an ID that holds none removes nothing.
  redis.call("ZREM", KEYS[3], ARGV[12])
  redis.call("ZREM", KEYS[4], ARGV[12])
end
if RID and not redis.call("SET", RID, "1", "NX", "PX", ARGV[11]) then return 0 end
--#include reconcileargs.lua
--#include adjustleased.lua
local w, wls = rget(KEYS[2], LW, now, wrr, wtr)
adjust(w, wa, 2 * wtr, wls[2], 2 * wrr, wls[1])
rput(KEYS[2], w, wrr, wtr, wls, now)
if ARGV[9] ~= "1" then
  local k, kls = rget(KEYS[1], LK, now, krr, ktr)
  adjust(k, ka, 2 * ktr, kls[2], 2 * krr, kls[1])
  rput(KEYS[1], k, krr, ktr, kls, now)
end
-- Each window bucket with a delta (the caller sends no other: one with
-- none is left alone, its clock too): refilled up to now at the figure of
-- its latest admission, not at the reconcile's (the admission's, maybe
-- changed since), created full at the reconcile's if absent; then its
-- level less the delta, floored at minus twice that figure by a debit and
-- capped at it, as a per-minute tokens bucket's. The figure is kept.
local spec = ARGV[14]
for i = 1, nw do
  local rf, p, d = struct.unpack(RSPEC, spec, i * 24 - 23)
  local key = KEYS[base + i]
  local last, l, fr, f = wget(key, now, nil, p, rf)
  l = l - d
  if d > 0 and l < -2 * f then l = -2 * f end
  if l >= f then l, fr = f, 0 end
  wput(key, last, l, fr, f, p)
end
return 1
