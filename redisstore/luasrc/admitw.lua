-- An admission whose figures carry windows (llmrate.Limits Windows): the
-- four per-minute buckets, every window bucket and the gauges in one
-- atomic step, all or nothing, with a bounded wait (MaxWait) as
-- admitx.lua has it. Concatenated after arith.lua, admitone.lua, one of
-- xplain.lua or xlease.lua (as admitx.lua: they define xget, xput, LK and
-- LW) and window.lua. An admission with a priority reserve
-- (AdmitRequest.Reserve) runs it too, windows or not (then nw = 0), with
-- its floors in ARGV[11]. Admissions with neither never run it:
-- admit.lua, batch.lua, lease.lua and admitx.lua are as they were.
-- KEYS[1]: the key's entry, KEYS[2]: the workspace's entry, KEYS[3] and
-- KEYS[4]: the key's and the workspace's gauges, then with leases the
-- key's and the workspace's lease hashes (LK, LW); then one entry per
-- window bucket (ARGV[10] lists them); last (optional) the admission's
-- identity record. All in one hash slot.
-- ARGV[1..8]: as admitx.lua (now_us, the request, the record's life, the
-- longest wait in µs, the two gauges' figures, a slot's life, the ID);
-- ARGV[9]: the input estimate; ARGV[10]: the window buckets, one WSPEC
-- each, in the order they are checked (the key's windows in order, in
-- each requests, tokens, input, output; then the workspace's).
-- ARGV[11] (optional: only with a priority reserve, AdmitRequest.Reserve)
-- the reserve's floors, little-endian doubles: the four per-minute
-- buckets', each window bucket's in ARGV[10]'s order, then the key's and
-- the workspace's gauges'. Each is an exact integer computed by the caller
-- (llmrate.ReserveFloor, at most 2 × 10^12, so an exact double). A bucket
-- admits only while it holds its need plus its floor; a gauge only while
-- its count plus one plus its floor is within its figure. With floors
-- ARGV[4] is ignored: such a request never gets a reservation.
-- Returns {allowed, refused, retry_us, never, kr, kt, wr, wt, wait_us,
-- the refusing window bucket (1-based; 0: none), then each window
-- bucket's level}; never is 1 when the request can never fit, plus 2 when
-- a floor refused it: the refusing bucket or gauge had room for it, not
-- above its floor (Decision.ByReserve).
local nw = #ARGV[10] / 32
local base = 4
if LK then base = 6 end
local XID = KEYS[base + nw + 1]

--#include wait_us.lua

-- An admitted decision's identity record: its four levels, its wait in
-- µs, then each window bucket's level, little-endian doubles.
local XDEC = "<" .. string.rep("d", 5 + nw)
if XID then
  local v = redis.call("GET", XID)
  if v then
    local t = {struct.unpack(XDEC, v)}
    local out = {1, 0, 0, 0, t[1], t[2], t[3], t[4], t[5], 0}
    for i = 1, nw do out[10 + i] = t[5 + i] end
    return out
  end
end

local now = now_us(ARGV[1])
local n, krr, ktr, wrr, wtr, s1 = struct.unpack(ADMIT, ARGV[2])
local solo = s1 == 1
local maxwait = tonumber(ARGV[4])
local kc, wc = tonumber(ARGV[5]), tonumber(ARGV[6])
local nin = tonumber(ARGV[9])
if solo then krr, ktr, wc = wrr, wtr, 0 end
-- The floors (ARGV[11]); 0 without a reserve.
local FL = ARGV[11]
local fkr, fkt, fwr, fwt, fkc, fwc = 0, 0, 0, 0, 0, 0
if FL then
  fkr, fkt, fwr, fwt = struct.unpack("<dddd", FL)
  fkc, fwc = struct.unpack("<dd", FL, 33 + 8 * nw)
  -- No reservation with a reserve: it is debited now, so one granted to a
  -- request that does not fit above its floors now would take a bucket
  -- below its floor at once. Refused instead, with the wait until it fits.
  maxwait = 0
end
local kkey, wkey = KEYS[1], KEYS[2]
local wl, wr, wrf, wt, wtf = xget(wkey, LW, now, wrr, wtr)
local kl, kr, krf, kt, ktf = wl, wr, wrf, wt, wtf
if not solo then kl, kr, krf, kt, ktf = xget(kkey, LK, now, krr, ktr) end

-- The window buckets, each refilled up to now; need is what it must hold
-- (one request, the estimate, the input estimate, 1 for an output meter)
-- and take what an admission debits (the output meter: nothing).
local code, fig, per, need, take = {}, {}, {}, {}, {}
local last, lv, fr = {}, {}, {}
local spec = ARGV[10]
for i = 1, nw do
  local c, m, f, p = struct.unpack(WSPEC, spec, i * 32 - 31)
  code[i], fig[i], per[i] = c, f, p
  if m == 0 then
    need[i], take[i] = 1, 1
  elseif m == 1 then
    need[i], take[i] = n, n
  elseif m == 2 then
    need[i], take[i] = nin, nin
  else
    need[i], take[i] = 1, 0
  end
  last[i], lv[i], fr[i] = wget(KEYS[base + i], now, f, p)
end
if FL then
  for i = 1, nw do need[i] = need[i] + struct.unpack("<d", FL, 25 + 8 * i) end
end

local refused, rwin = -1, 0
if kr < 1 + fkr then
  refused = 0
elseif kt < n + fkt then
  refused = 1
elseif wr < 1 + fwr then
  refused = 2
elseif wt < n + fwt then
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
  -- longest capped (a per-minute bucket's at 60 s, a window's at the
  -- longer of 60 s and its window) is the Retry-After.
  local capped = 0
  local function tk(cap, s, nv)
    if s > retry then retry = s end
    if nv then never = 1 end
    if s > cap then s = cap end
    if s > capped then capped = s end
  end
  tk(60000000, wait_us(kr, krf, 1 + fkr, krr, 2 * krr))
  tk(60000000, wait_us(kt, ktf, n + fkt, ktr, 2 * ktr))
  tk(60000000, wait_us(wr, wrf, 1 + fwr, wrr, 2 * wrr))
  tk(60000000, wait_us(wt, wtf, n + fwt, wtr, 2 * wtr))
  for i = 1, nw do
    tk(math.max(60000000, per[i]), wwait_us(lv[i], fr[i], need[i], fig[i], per[i]))
  end
  if maxwait > 0 and never == 0 and retry <= maxwait then
    refused, rwin, wait, retry = -1, 0, retry, 0 -- a reservation
  else
    retry = capped
  end
end

-- The gauges, after every bucket: only a request the buckets admit (now
-- or by a reservation) looks at them.
local srv = 0
if refused < 0 and (kc > 0 or wc > 0) then
  local t = redis.call("TIME")
  srv = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local held = 0
  if kc > 0 then
    redis.call("ZREMRANGEBYSCORE", KEYS[3], "-inf", srv)
    held = redis.call("ZCARD", KEYS[3])
    if held >= kc - fkc then refused = 4 end
  end
  if refused < 0 and wc > 0 then
    redis.call("ZREMRANGEBYSCORE", KEYS[4], "-inf", srv)
    held = redis.call("ZCARD", KEYS[4])
    if held >= wc - fwc then refused = 5 end
  end
  if refused >= 0 then
    retry, wait = math.max(wait, 1000000), 0
    local gf = kc
    if refused == 5 then gf = wc end
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

local out = {0, refused, retry, never, 0, 0, 0, 0, 0, rwin}
if refused < 0 then
  out[1], out[2] = 1, 0
  --#include debit.lua
  for i = 1, nw do lv[i] = lv[i] - take[i] end
end
-- Entries are written back, admitted or not (a refused one advanced to
-- now, so that the latest time seen is kept), each to live until time
-- alone has refilled it.
if not solo then xput(kkey, kl, kr, krf, kt, ktf, krr, ktr, now) end
xput(wkey, wl, wr, wrf, wt, wtf, wrr, wtr, now)
for i = 1, nw do
  wput(KEYS[base + i], last[i], lv[i], fr[i], fig[i], per[i])
  out[10 + i] = lv[i]
end
out[5], out[6], out[7], out[8], out[9] = kr, kt, wr, wt, wait
if refused >= 0 then return out end

if srv > 0 then
  -- Each gauge lives as long as its latest slot (as admitx.lua).
  local life = tonumber(ARGV[7])
  local exp = srv + life * 1000
  if kc > 0 then
    redis.call("ZADD", KEYS[3], exp, ARGV[8])
    redis.call("PEXPIRE", KEYS[3], life + 1000)
  end
  if wc > 0 then
    redis.call("ZADD", KEYS[4], exp, ARGV[8])
    redis.call("PEXPIRE", KEYS[4], life + 1000)
  end
end
if XID then
  local rec = {kr, kt, wr, wt, wait}
  for i = 1, nw do rec[5 + i] = lv[i] end
  redis.call("SET", XID, struct.pack(XDEC, unpack(rec)), "PX", ARGV[3])
end
return out
