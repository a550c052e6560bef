-- admit_one, the admission shared by admit.lua and batch.lua
-- (concatenated after arith.lua). Entries are kept in locals, not tables,
-- and only the functions an admission needs are defined: Redis runs the
-- whole script body on every call, so each table and each function
-- definition costs on every admission.

-- get returns the entry at key (last, rl, rf, tl, tf) refilled up to now:
-- created full at now when absent; its time moved to now, or kept when the
-- clock went backwards, which refills nothing.
local function get(key, now, rrate, trate)
  local v = redis.call("GET", key)
  if not v then return now, 2 * rrate, 0, 2 * trate, 0 end
  local last, rl, rf, tl, tf = struct.unpack(FMT, v)
  local dt = now - last
  if dt > 0 then last = now else dt = 0 end
  rl, rf = refill(rl, rf, rrate, 2 * rrate, dt)
  tl, tf = refill(tl, tf, trate, 2 * trate, dt)
  return last, rl, rf, tl, tf
end

-- put writes an entry back, to expire once time alone would have refilled
-- it to full (ttl).
local function put(key, last, rl, rf, tl, tf, rrate, trate)
  local px = math.max(ttl(rl, rrate, 2 * rrate), ttl(tl, trate, 2 * trate))
  redis.call("SET", key, struct.pack(FMT, last, rl, rf, tl, tf), "PX", px)
end

-- ADMIT is the format of one admission's argument: six little-endian
-- doubles, tokens, key rpm, key tpm, ws rpm, ws tpm and solo (1: the key is
-- its own workspace; its buckets are kept once, in wkey, and kkey is not
-- touched). One binary string unpacked at once costs the server less than
-- six decimal ones parsed.
local ADMIT = "<dddddd"

-- admit_one checks and debits one request's four buckets, all or nothing;
-- arg is the request (ADMIT).
-- Returns {allowed, refused, retry_s, never, kr, kt, wr, wt}: refused is
-- the first bucket, in admission order (0 key requests, 1 key tokens, 2
-- workspace requests, 3 workspace tokens), without room for one request
-- and n tokens; retry_s and never the longest of the four buckets' waits.
local function admit_one(kkey, wkey, now, arg)
  local n, krr, ktr, wrr, wtr, s1 = struct.unpack(ADMIT, arg)
  local solo = s1 == 1
  local wl, wr, wrf, wt, wtf = get(wkey, now, wrr, wtr)
  local kl, kr, krf, kt, ktf = wl, wr, wrf, wt, wtf
  if not solo then kl, kr, krf, kt, ktf = get(kkey, now, krr, ktr) end
  --#include cascade.lua
  if refused < 0 then
    --#include debit.lua
    if not solo then put(kkey, kl, kr, krf, kt, ktf, krr, ktr) end
    put(wkey, wl, wr, wrf, wt, wtf, wrr, wtr)
    return {1, 0, 0, 0, kr, kt, wr, wt}
  end
  -- Refused: nothing is debited, but the entries are written back advanced
  -- to now, so that the latest time seen is kept (a clock that then steps
  -- back refills nothing), exactly as the memory store keeps it.
  if not solo then put(kkey, kl, kr, krf, kt, ktf, krr, ktr) end
  put(wkey, wl, wr, wrf, wt, wtf, wrr, wtr)
  --#include waits.lua
  return {0, refused, retry, never, kr, kt, wr, wt}
end

-- DEC is an admitted decision as its identity record holds it: its four
-- levels (kr, kt, wr, wt) as little-endian doubles (allowed, refused,
-- retry and never are 1, 0, 0, 0 for every admitted one).
local DEC = "<dddd"

-- admit_id is admit_one for an admission with an identity record idkey
-- ("": none): an admission already admitted under it answers with that
-- first decision and debits nothing again; an admission is recorded there,
-- for life ms. A refused one is not recorded (it debited nothing, so
-- deciding it again is harmless).
local function admit_id(kkey, wkey, idkey, now, arg, life)
  if idkey ~= "" then
    local v = redis.call("GET", idkey)
    if v then
      local a, b, c, d = struct.unpack(DEC, v)
      return {1, 0, 0, 0, a, b, c, d}
    end
  end
  local r = admit_one(kkey, wkey, now, arg)
  if idkey ~= "" and r[1] == 1 then
    redis.call("SET", idkey, struct.pack(DEC, r[5], r[6], r[7], r[8]), "PX", life)
  end
  return r
end
