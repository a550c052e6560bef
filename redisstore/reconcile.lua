-- KEYS as admit.lua. ARGV: now_us, estimate, key actual, ws actual (each
-- already bounded at 2x its bucket's capacity), key rpm, key tpm, ws rpm,
-- ws tpm, solo (as in admit.lua).
local now = now_us(ARGV[1])
local est = tonumber(ARGV[2])
local ka, wa = tonumber(ARGV[3]), tonumber(ARGV[4])
local krr, ktr, wrr, wtr = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local function adjust(e, actual, cap)
  local l = e[4] - (actual - est)
  if actual > est and l < -2 * cap then l = -2 * cap end
  if l >= cap then
    l = cap
    e[5] = 0
  end
  e[4] = l
end
local w = load(KEYS[2], now, wrr, wtr)
adjust(w, wa, 2 * wtr)
store(KEYS[2], w, wrr, wtr)
if ARGV[9] ~= "1" then
  local k = load(KEYS[1], now, krr, ktr)
  adjust(k, ka, 2 * ktr)
  store(KEYS[1], k, krr, ktr)
end
return 1
