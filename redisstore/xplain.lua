-- admitx.lua without leases: entries as admit_one reads and writes them.
local XID = KEYS[5]
local LK, LW
local function xget(key, _, now, rrate, trate)
  return get(key, now, rrate, trate)
end
local function xput(key, last, rl, rf, tl, tf, rrate, trate, _)
  put(key, last, rl, rf, tl, tf, rrate, trate)
end
