-- reconcilew.lua with leases (after leasebucket.lua): the entries read and
-- written as admitx.lua's xlease.lua does, so that a credit stops at the
-- capacity less the capacity out on lease (every process's, this one's
-- included: a windowed reconcile returns none), and an entry lives as long
-- as its leases.
local LK, LW = KEYS[5], KEYS[6]
local function rget(key, hkey, now, rrate, trate)
  return lload(key, hkey, now, rrate, trate, "", 0, 0)
end
local function rput(key, e, rrate, trate, l, now)
  lstore(key, e, rrate, trate, l[3], now)
end
