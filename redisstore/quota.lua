-- Calendar and session window buckets (llmrate.Window Calendar, Session),
-- shared by admitq.lua and reconcileq.lua (concatenated after window.lua).
-- Lua has no zone data: the caller (quota.go) computes the calendar
-- periods around the server time it last saw and passes three consecutive
-- ones, [p0, p1), [p1, p2), [p2, p3), in µs; the bucket keeps what was
-- spent and its own recorded [start, end), and moves to another period
-- only once the server's clock has passed the recorded end, so that two
-- processes (two tzdata versions, a promoted replica) never reset one
-- period twice. A session bucket records its opening instant (server
-- time) and its end, Per later.

-- A quota entry is three little-endian doubles: spent, start, end (µs).
local QFMT = "<ddd"

-- QSPEC is one window bucket of an admission (admitq.lua): as WSPEC
-- (code, meter, figure, window in µs), then its kind (0 rolling, 1
-- calendar, 2 session) and the calendar periods' bounds p0..p3 (0 for the
-- others). A reconcile's (reconcileq.lua) is RQSPEC: figure, window in
-- µs, the delta, the kind and p0..p3.
local QSPEC = "<ddddddddd"
local RQSPEC = "<dddddddd"

-- qperiod returns the bounds of the passed period holding now, or nil when
-- none does: the caller's idea of the server's time is off by more than a
-- period (the admission then fails open, counted by the caller).
local function qperiod(now, p0, p1, p2, p3)
  if now >= p1 and now < p2 then return p1, p2 end
  if now >= p2 and now < p3 then return p2, p3 end
  if now >= p0 and now < p1 then return p0, p1 end
  return nil
end

-- qput writes a quota entry, to expire a minute after its end.
local function qput(key, sp, s, e, now)
  redis.call("SET", key, struct.pack(QFMT, sp, s, e), "PX", math.max(math.ceil((e - now) / 1000), 0) + 60000)
end

-- qget returns the quota entry at key as in force at now: spent, start,
-- end, and whether it is in force (a session open, a calendar period
-- recorded). A recorded period is kept while now is before its end; past
-- it (or absent), a calendar bucket starts the passed period holding now,
-- full (nil, nil, nil, false when none does), and a session bucket is
-- unused and full (start and end 0). The fifth value is true when an
-- entry was found past its end (stale): the caller writes its successor
-- (qstale) even when it debits nothing, so that a clock stepping back
-- afterwards never finds the period or session it left in force again.
local function qget(key, kind, now, p0, p1, p2, p3)
  local v = redis.call("GET", key)
  if v then
    local sp, s, e = struct.unpack(QFMT, v)
    if now < e then return sp, s, e, true, false end
  end
  if kind == 2 then return 0, 0, 0, false, v ~= false and v ~= nil end
  local s, e = qperiod(now, p0, p1, p2, p3)
  if not s then return nil, nil, nil, false, false end
  return 0, s, e, false, v ~= false and v ~= nil
end

-- qstale replaces a stale entry by its successor: a calendar bucket's new
-- period, empty; a session bucket's nothing (unused).
local function qstale(key, kind, s, e, now)
  if kind == 2 then
    redis.call("DEL", key)
  else
    qput(key, 0, s, e, now)
  end
end

-- qcap bounds what a bucket of figure f holds spent: at least 0 (a credit
-- never takes it above full) and, by a debit, at most 3f (its level at
-- minus twice its capacity, as a rolling window's).
local function qcap(sp, f, debit)
  if sp < 0 then return 0 end
  if debit and sp > 3 * f then return 3 * f end
  return sp
end
