-- An admission with a bounded wait (AdmitRequest.MaxWait) or concurrency
-- gauges (Limits.ConcurrentRequests), concatenated after arith.lua,
-- admitone.lua and one of xplain.lua (no leases) or xlease.lua (WithLeases:
-- the entries are read and written as lease.lua does, so capacity out on
-- lease is not admitted twice), which define xget, xput, XID, LK and LW.
-- Admissions with neither run admit.lua, which this script leaves
-- untouched, so they cost what they did before.
-- KEYS[1]: the key's entry, KEYS[2]: the workspace's entry, KEYS[3]: the
-- key's gauge, KEYS[4]: the workspace's gauge (one hash slot), then, with
-- leases, the key's and the workspace's lease hashes (LK, LW); last
-- (optional): the admission's identity record (XID).
-- ARGV[1]: now_us ("" = server TIME), ARGV[2]: the request (admit_one's
-- ADMIT), ARGV[3]: the identity record's life in ms, ARGV[4]: the longest
-- wait in µs (0: none), ARGV[5]: the key gauge's figure (a Solo request's
-- one gauge; 0: none), ARGV[6]: the workspace gauge's figure (0: none),
-- ARGV[7]: a slot's life in ms, ARGV[8]: the admission's ID (its slots'
-- member name).
-- Returns {allowed, refused, retry_us, never, kr, kt, wr, wt, wait_us}.
--
-- A gauge is a sorted set of the admission IDs holding a slot, each scored
-- by its expiry in µs on the server's clock (TIME, whatever ARGV[1] says:
-- a slot's life is real time). Expired members are removed before the
-- count; their holders' processes stopped refreshing them.

--#include wait_us.lua

-- XDEC is an admitted decision as its identity record holds it: its four
-- levels and its wait in µs.
local XDEC = "<ddddd"
if XID then
  local v = redis.call("GET", XID)
  if v then
    local a, b, c, d, w = struct.unpack(XDEC, v)
    return {1, 0, 0, 0, a, b, c, d, w}
  end
end

local now = now_us(ARGV[1])
local n, krr, ktr, wrr, wtr, s1 = struct.unpack(ADMIT, ARGV[2])
local solo = s1 == 1
local maxwait = tonumber(ARGV[4])
local kc, wc = tonumber(ARGV[5]), tonumber(ARGV[6])
if solo then krr, ktr, wc = wrr, wtr, 0 end
local kkey, wkey = KEYS[1], KEYS[2]
local wl, wr, wrf, wt, wtf = xget(wkey, LW, now, wrr, wtr)
local kl, kr, krf, kt, ktf = wl, wr, wrf, wt, wtf
if not solo then kl, kr, krf, kt, ktf = xget(kkey, LK, now, krr, ktr) end

--#include cascade.lua
local retry, never, wait = 0, 0, 0
if refused >= 0 then
  local function take(s, nv)
    if s > retry then retry = s end
    if nv then never = 1 end
  end
  take(wait_us(kr, krf, 1, krr, 2 * krr))
  take(wait_us(kt, ktf, n, ktr, 2 * ktr))
  take(wait_us(wr, wrf, 1, wrr, 2 * wrr))
  take(wait_us(wt, wtf, n, wtr, 2 * wtr))
  if maxwait > 0 and never == 0 and retry <= maxwait then
    refused, wait, retry = -1, retry, 0 -- a reservation
  elseif retry > 60000000 then
    retry = 60000000
  end
end

-- The gauges, after the four buckets: only a request the buckets admit
-- (now or by a reservation) looks at them.
local srv = 0
if refused < 0 and (kc > 0 or wc > 0) then
  local t = redis.call("TIME")
  srv = tonumber(t[1]) * 1000000 + tonumber(t[2])
  if kc > 0 then
    redis.call("ZREMRANGEBYSCORE", KEYS[3], "-inf", srv)
    if redis.call("ZCARD", KEYS[3]) >= kc then refused = 4 end
  end
  if refused < 0 and wc > 0 then
    redis.call("ZREMRANGEBYSCORE", KEYS[4], "-inf", srv)
    if redis.call("ZCARD", KEYS[4]) >= wc then refused = 5 end
  end
  if refused >= 0 then
    retry, wait = math.max(wait, 1000000), 0
  end
end

if refused >= 0 then
  -- Refused: nothing debited, no slot taken; the entries are written back
  -- advanced to now, as admit_one does.
  if not solo then xput(kkey, kl, kr, krf, kt, ktf, krr, ktr, now) end
  xput(wkey, wl, wr, wrf, wt, wtf, wrr, wtr, now)
  return {0, refused, retry, never, kr, kt, wr, wt, 0}
end

--#include debit.lua
if not solo then xput(kkey, kl, kr, krf, kt, ktf, krr, ktr, now) end
xput(wkey, wl, wr, wrf, wt, wtf, wrr, wtr, now)
if srv > 0 then
  -- Each gauge lives as long as its latest slot: every slot expires at
  -- most a slot's life after its latest write, which is this one.
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
  redis.call("SET", XID, struct.pack(XDEC, kr, kt, wr, wt, wait), "PX", ARGV[3])
end
return {1, 0, 0, 0, kr, kt, wr, wt, wait}
