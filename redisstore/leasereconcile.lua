-- reconcile.lua with leases: a credit stops at the capacity less the
-- capacity out on lease. KEYS: as lease.lua. ARGV: as reconcile.lua, then
-- the workspace lease's holder ("" = none), the unused parts returned
-- first (kr, kt, wr, wt), the key lease's holder ("" = none).
local now = now_us(ARGV[1])
local est = tonumber(ARGV[2])
local ka, wa = tonumber(ARGV[3]), tonumber(ARGV[4])
local krr, ktr, wrr, wtr = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local function adjust(e, actual, cap, leased)
  local l = e[4] - (actual - est)
  if actual > est and l < -2 * cap then l = -2 * cap end
  if l >= cap - leased then -- lload left the level at most there
    l = cap - leased
    e[5] = 0
  end
  e[4] = l
end
local w, wl = lload(KEYS[2], KEYS[4], now, wrr, wtr, ARGV[10], tonumber(ARGV[13]), tonumber(ARGV[14]))
adjust(w, wa, 2 * wtr, wl[2])
lstore(KEYS[2], w, wrr, wtr, wl[3], now)
if ARGV[9] ~= "1" then
  local k, kl = lload(KEYS[1], KEYS[3], now, krr, ktr, ARGV[15], tonumber(ARGV[11]), tonumber(ARGV[12]))
  adjust(k, ka, 2 * ktr, kl[2])
  lstore(KEYS[1], k, krr, ktr, kl[3], now)
end
return 1
