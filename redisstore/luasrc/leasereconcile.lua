-- reconcile.lua with leases: a credit stops at the capacity less the
-- capacity out on lease. KEYS: as lease.lua, KEYS[5] (optional) being the
-- reconcile's identity record (as reconcile.lua's KEYS[3]). ARGV: as
-- reconcile.lua (refund and the record's life included), then the
-- workspace lease returned ("" = none), the unused parts returned first
-- (kr, kt, wr, wt), the key lease returned ("" = none).
-- Returns 1 when applied, 0 when already applied under its identity.
-- The leases sent back are returned either way: a repeat sent later (the
-- limiter's retry) carries the leases this process held then, which it
-- has given up; a lease already returned (a resend of the same call)
-- credits nothing again, since a return names the lease it returns.
local applied = not KEYS[5] or redis.call("SET", KEYS[5], "1", "NX", "PX", ARGV[11])
if not applied and ARGV[12] == "" and ARGV[17] == "" then return 0 end
--#include reconcileargs.lua
--#include adjustleased.lua
local w, wl = lload(KEYS[2], KEYS[4], now, wrr, wtr, ARGV[12], tonumber(ARGV[15]), tonumber(ARGV[16]))
if applied then adjust(w, wa, 2 * wtr, wl[2], 2 * wrr, wl[1]) end
lstore(KEYS[2], w, wrr, wtr, wl[3], now)
if ARGV[9] ~= "1" then
  local k, kl = lload(KEYS[1], KEYS[3], now, krr, ktr, ARGV[17], tonumber(ARGV[13]), tonumber(ARGV[14]))
  if applied then adjust(k, ka, 2 * ktr, kl[2], 2 * krr, kl[1]) end
  lstore(KEYS[1], k, krr, ktr, kl[3], now)
end
if applied then return 1 end
return 0
