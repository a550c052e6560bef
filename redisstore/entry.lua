-- Entries as tables {last, rl, rf, tl, tf}, for the reconcile and lease
-- scripts (concatenated after arith.lua). The admission scripts use the
-- table-free versions in admitone.lua instead.

-- fetch returns the entry {last, rl, rf, tl, tf} at key, created full at
-- now when absent, its time moved to now, and the time to refill it for: 0
-- when the clock went backwards, which refills nothing.
local function fetch(key, now, rrate, trate)
  local v = redis.call("GET", key)
  local e
  if v then
    local a, b, c, d, f = struct.unpack(FMT, v)
    e = {a, b, c, d, f}
  else
    e = {now, 2 * rrate, 0, 2 * trate, 0}
  end
  local dt = now - e[1]
  if dt > 0 then e[1] = now else dt = 0 end
  return e, dt
end

-- load returns the entry at key (fetch), refilled up to now.
local function load(key, now, rrate, trate)
  local e, dt = fetch(key, now, rrate, trate)
  e[2], e[3] = refill(e[2], e[3], rrate, 2 * rrate, dt)
  e[4], e[5] = refill(e[4], e[5], trate, 2 * trate, dt)
  return e
end

-- entry_ttl is how long, in ms, entry e takes to refill to full by time
-- alone: past it, a missing entry (created full) is the same entry.
local function entry_ttl(e, rrate, trate)
  return math.max(ttl(e[2], rrate, 2 * rrate), ttl(e[4], trate, 2 * trate))
end

local function store(key, e, rrate, trate)
  local px = entry_ttl(e, rrate, trate)
  redis.call("SET", key, struct.pack(FMT, e[1], e[2], e[3], e[4], e[5]), "PX", px)
end

-- first_refused returns the first bucket, in admission order (0 key
-- requests, 1 key tokens, 2 workspace requests, 3 workspace tokens), without
-- room for one request and n tokens; -1 when all four have room (for the
-- lease script; admitone.lua has the admissions' own).
local function first_refused(k, w, n)
  if k[2] < 1 then
    return 0
  elseif k[4] < n then
    return 1
  elseif w[2] < 1 then
    return 2
  elseif w[4] < n then
    return 3
  end
  return -1
end

-- longest_wait is a refused request's wait, in whole seconds, and never
-- (1 when it can never fit): the longest of its four buckets' waits for one
-- request and n tokens.
local function longest_wait(k, w, n, krr, ktr, wrr, wtr)
  local retry, never = 0, 0
  local function take(s, nv)
    if s > retry then retry = s end
    if nv then never = 1 end
  end
  take(wait(k[2], k[3], 1, krr, 2 * krr))
  take(wait(k[4], k[5], n, ktr, 2 * ktr))
  take(wait(w[2], w[3], 1, wrr, 2 * wrr))
  take(wait(w[4], w[5], n, wtr, 2 * wtr))
  return retry, never
end
