-- Lease bookkeeping, shared by lease.lua and leasereconcile.lua (after
-- arith.lua and entry.lua). An entry's leases are a hash next to it (same hash tag):
-- field = the holder's lease id, value = three little-endian doubles
-- (requests, tokens, expiry in µs). A bucket's level refills only up to its
-- capacity less every unexpired lease taken from it, so the level plus all
-- capacity out on lease never exceeds the capacity: that is what keeps the
-- processes together within one exact limit.
local LFMT = "<ddd"

-- leases returns the requests and tokens out on unexpired leases of hkey
-- other than own's, the latest expiry among them, and own's record (nil if
-- own is "" or has none). Expired records are deleted.
local function leases(hkey, now, own)
  local all = redis.call("HGETALL", hkey)
  local lr, lt, maxexp, mine = 0, 0, 0, nil
  for i = 1, #all, 2 do
    local r, t, exp = struct.unpack(LFMT, all[i + 1])
    if exp <= now then
      redis.call("HDEL", hkey, all[i])
    elseif own ~= "" and all[i] == own then
      mine = {r, t, exp}
    else
      lr = lr + r
      lt = lt + t
      if exp > maxexp then maxexp = exp end
    end
  end
  return lr, lt, maxexp, mine
end

-- lload is load (entry.lua: fetch, then refill) with the capacity out on lease taken off each
-- bucket's capacity while it refills. The caller's own lease (if any) is
-- then returned: its record is deleted and its unused part, ret_r and
-- ret_t, credited. The level is then at most the capacity less the other
-- leases (a level above it, after the figures were lowered, is clamped
-- there, as load clamps to the capacity).
-- Returns the entry and {lr, lt, maxexp} of the other leases.
local function lload(key, hkey, now, rrate, trate, own, ret_r, ret_t)
  local lr, lt, maxexp, mine = leases(hkey, now, own)
  local hr, ht = lr, lt
  if mine then
    hr, ht = lr + mine[1], lt + mine[2]
  end
  local e, dt = fetch(key, now, rrate, trate)
  -- Refill up to the capacity less every lease, the caller's included; a
  -- level above that (figures lowered since) is clamped below, once the
  -- caller's lease is back.
  if e[2] < 2 * rrate - hr then e[2], e[3] = refill(e[2], e[3], rrate, 2 * rrate - hr, dt) end
  if e[4] < 2 * trate - ht then e[4], e[5] = refill(e[4], e[5], trate, 2 * trate - ht, dt) end
  if mine then
    redis.call("HDEL", hkey, own)
    e[2] = e[2] + math.min(ret_r, mine[1])
    e[4] = e[4] + math.min(ret_t, mine[2])
  end
  if e[2] >= 2 * rrate - lr then
    e[2], e[3] = 2 * rrate - lr, 0
  end
  if e[4] >= 2 * trate - lt then
    e[4], e[5] = 2 * trate - lt, 0
  end
  return e, {lr, lt, maxexp}
end

-- lstore is store (entry.lua), kept at least until the entry's last lease
-- expires (a recreated entry would start full, its leases forgotten).
local function lstore(key, e, rrate, trate, maxexp, now)
  local px = entry_ttl(e, rrate, trate)
  if maxexp > now then px = math.max(px, math.ceil((maxexp - now) / 1000) + 1000) end
  redis.call("SET", key, struct.pack(FMT, e[1], e[2], e[3], e[4], e[5]), "PX", px)
end

-- grant records a lease of r requests and t tokens on hkey until exp.
local function grant(hkey, own, r, t, exp, now)
  redis.call("HSET", hkey, own, struct.pack(LFMT, r, t, exp))
  local left = redis.call("PTTL", hkey)
  local want = math.ceil((exp - now) / 1000) + 1000
  if left < want then redis.call("PEXPIRE", hkey, want) end
end
