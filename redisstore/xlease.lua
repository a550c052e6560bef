-- admitx.lua with leases (after entry.lua and leasebucket.lua): an entry
-- refills only up to its capacity less every unexpired lease taken from
-- it, this process's own included (it is not returned here), and is kept
-- at least as long as its leases, exactly as lease.lua keeps it.
local LK, LW, XID = KEYS[5], KEYS[6], KEYS[7]
local xexp = {}
local function xget(key, hkey, now, rrate, trate)
  local e, l = lload(key, hkey, now, rrate, trate, "", 0, 0)
  xexp[key] = l[3]
  return e[1], e[2], e[3], e[4], e[5]
end
local function xput(key, last, rl, rf, tl, tf, rrate, trate, now)
  lstore(key, {last, rl, rf, tl, tf}, rrate, trate, xexp[key], now)
end
