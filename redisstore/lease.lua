-- One admission with leases, and the lease's renewal, in one call.
-- KEYS: key entry, workspace entry, key leases, workspace leases, and
-- (optional) the admission's identity record (admit_id in admitone.lua:
-- an admission resent under it answers with its first result, and
-- changes nothing again).
-- ARGV: now_us, the workspace lease returned ("" = none), tokens (-1:
-- admit nothing, only return the leases), key rpm, key tpm, ws rpm, ws tpm,
-- solo, then the lease wanted (kr, kt, wr, wt; all 0: none), the old
-- leases' unused parts returned (kr, kt, wr, wt), the lease's lifetime in
-- µs, the key lease returned ("" = none), the workspace and key leases
-- granted ("" = none wanted), the identity record's life in ms.
--
-- Leases are fenced: a lease is a field of its entry's lease hash named
-- by its holder and generation, written once, by its grant, and a return
-- names the very lease it returns, which it deletes, crediting its unused
-- part. A late return of an older lease never touches a newer one, and a
-- lease already returned (or expired) credits nothing.
-- A process holds one lease per entry: its workspace lease is shared by
-- all its keys of that workspace, so it must send the whole of it.
-- Returns {allowed, refused, retry_s, never, kr, kt, wr, wt, lkr, lkt, lwr, lwt}:
-- the decision as admit.lua's, levels after the debit and before the new
-- lease, and the lease granted (all 0 when none).
-- An admitted result's identity record: its levels and the lease granted
-- (allowed, refused, retry and never are 1, 0, 0, 0).
local LDEC = "<dddddddd"
if KEYS[5] then
  local v = redis.call("GET", KEYS[5])
  if v then
    local a, b, c, d, e, f, g, h = struct.unpack(LDEC, v)
    return {1, 0, 0, 0, a, b, c, d, e, f, g, h}
  end
end
local now = now_us(ARGV[1])
local wown, kown = ARGV[2], ARGV[18]
local wnew, knew = ARGV[19], ARGV[20]
local n = tonumber(ARGV[3])
local krr, ktr, wrr, wtr = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local solo = ARGV[8] == "1"
local want = {tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[11]), tonumber(ARGV[12])}
local life = tonumber(ARGV[17])

local w, wl = lload(KEYS[2], KEYS[4], now, wrr, wtr, wown, tonumber(ARGV[15]), tonumber(ARGV[16]))
local k, kl = w, wl
if not solo then
  k, kl = lload(KEYS[1], KEYS[3], now, krr, ktr, kown, tonumber(ARGV[13]), tonumber(ARGV[14]))
end
local function save(kexp, wexp)
  if not solo then lstore(KEYS[1], k, krr, ktr, kexp, now) end
  lstore(KEYS[2], w, wrr, wtr, wexp, now)
end

if n < 0 then -- a return only
  save(kl[3], wl[3])
  return {1, 0, 0, 0, k[2], k[4], w[2], w[4], 0, 0, 0, 0}
end

local refused = first_refused(k, w, n)
if refused >= 0 then
  save(kl[3], wl[3])
  local retry, never = longest_wait(k, w, n, krr, ktr, wrr, wtr)
  return {0, refused, retry, never, k[2], k[4], w[2], w[4], 0, 0, 0, 0}
end

k[2] = k[2] - 1
k[4] = k[4] - n
if not solo then
  w[2] = w[2] - 1
  w[4] = w[4] - n
end
local out = {1, 0, 0, 0, k[2], k[4], w[2], w[4], 0, 0, 0, 0}

-- The lease: all four buckets (two when solo) or none.
local g = {math.min(want[1], k[2]), math.min(want[2], k[4]), math.min(want[3], w[2]), math.min(want[4], w[4])}
if solo then g[1], g[2] = g[3], g[4] end
if wnew ~= "" and (solo or knew ~= "") and g[1] >= 1 and g[2] >= 1 and g[3] >= 1 and g[4] >= 1 then
  local exp = now + life
  if solo then
    w[2] = w[2] - g[3]
    w[4] = w[4] - g[4]
    grant(KEYS[4], wnew, g[3], g[4], exp, now)
  else
    k[2] = k[2] - g[1]
    k[4] = k[4] - g[2]
    w[2] = w[2] - g[3]
    w[4] = w[4] - g[4]
    grant(KEYS[3], knew, g[1], g[2], exp, now)
    grant(KEYS[4], wnew, g[3], g[4], exp, now)
  end
  out[9], out[10], out[11], out[12] = g[1], g[2], g[3], g[4]
  save(math.max(kl[3], exp), math.max(wl[3], exp))
else
  save(kl[3], wl[3])
end
if KEYS[5] then
  redis.call("SET", KEYS[5], struct.pack(LDEC, out[5], out[6], out[7], out[8], out[9], out[10], out[11], out[12]), "PX", ARGV[21])
end
return out
