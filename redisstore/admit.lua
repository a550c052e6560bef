-- KEYS[1]: the key's entry, KEYS[2]: the workspace's entry (one hash slot).
-- ARGV: now_us ("" = server TIME), tokens, key rpm, key tpm, ws rpm, ws tpm,
-- solo ("1": the key is its own workspace; its buckets are kept once, in
-- KEYS[2], and KEYS[1] is not touched).
-- Returns {allowed, refused, retry_s, never, kr, kt, wr, wt}.
local now = now_us(ARGV[1])
local n = tonumber(ARGV[2])
local krr, ktr, wrr, wtr = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local solo = ARGV[7] == "1"
local w = load(KEYS[2], now, wrr, wtr)
local k = w
if not solo then k = load(KEYS[1], now, krr, ktr) end
-- the four buckets in admission order: {entry, level index, need, rate}
local bs = {{k, 2, 1, krr}, {k, 4, n, ktr}, {w, 2, 1, wrr}, {w, 4, n, wtr}}
local refused = -1
for i = 1, 4 do
  local b = bs[i]
  if b[1][b[2]] < b[3] then
    refused = i - 1
    break
  end
end
if refused < 0 then
  local last = 4
  if solo then last = 2 end -- k and w are one entry: debit it once
  for i = 1, last do
    local b = bs[i]
    b[1][b[2]] = b[1][b[2]] - b[3]
  end
  if not solo then store(KEYS[1], k, krr, ktr) end
  store(KEYS[2], w, wrr, wtr)
  return {1, 0, 0, 0, k[2], k[4], w[2], w[4]}
end
local retry, never = 0, 0
for i = 1, 4 do
  local b = bs[i]
  local s, nv = wait(b[1][b[2]], b[1][b[2] + 1], b[3], b[4], 2 * b[4])
  if s > retry then retry = s end
  if nv then never = 1 end
end
return {0, refused, retry, never, k[2], k[4], w[2], w[4]}
