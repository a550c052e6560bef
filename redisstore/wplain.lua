-- reconcilew.lua without leases: entries as reconcile.lua reads and
-- writes them, no capacity out on lease.
local LK, LW
local NOLEASE = {0, 0, 0}
local function rget(key, _, now, rrate, trate)
  return load(key, now, rrate, trate), NOLEASE
end
local function rput(key, e, rrate, trate)
  store(key, e, rrate, trate)
end
