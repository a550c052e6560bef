-- KEYS as admit.lua, RID (KEYS[3] when present: rid.lua; release.lua
-- names another) being the reconcile's identity record: a reconcile is
-- applied only when its record is absent, and writes it (for ARGV[11] ms),
-- so a resent reconcile is applied once.
-- ARGV: now_us, estimate, key actual, ws actual (each already bounded at
-- 2x its bucket's capacity), key rpm, key tpm, ws rpm, ws tpm, solo (as in
-- admit.lua), refund ("1": credit one request and the estimate back,
-- actuals ignored; "c": a fallback admission's charge, reconcileargs.lua),
-- the record's life in ms.
-- Returns 1 when applied, 0 when already applied under its identity.
if RID and not redis.call("SET", RID, "1", "NX", "PX", ARGV[11]) then return 0 end
--#include reconcileargs.lua
local function adjust(e, actual, rcap, tcap)
  if refund then
    e[2] = e[2] + 1
    if e[2] >= rcap then e[2], e[3] = rcap, 0 end
    actual = 0
  elseif charge then
    e[2] = e[2] - 1
    if e[2] < -2 * rcap then e[2] = -2 * rcap end
  end
  local l = e[4] - (actual - est)
  if actual > est and l < -2 * tcap then l = -2 * tcap end
  if l >= tcap then
    l = tcap
    e[5] = 0
  end
  e[4] = l
end
local w = load(KEYS[2], now, wrr, wtr)
adjust(w, wa, 2 * wrr, 2 * wtr)
store(KEYS[2], w, wrr, wtr)
if ARGV[9] ~= "1" then
  local k = load(KEYS[1], now, krr, ktr)
  adjust(k, ka, 2 * krr, 2 * ktr)
  store(KEYS[1], k, krr, ktr)
end
return 1
