-- reconcilew.lua with leases (after leasebucket.lua): the entries read and
-- written as leasereconcile.lua does, so that a credit stops at the
-- capacity less the capacity out on lease, and an entry lives as long as
-- its leases. Before a debit this process's own leases go back in the
-- same call, as with leasereconcile.lua: ARGV[15] the workspace's record
-- ("" = none), ARGV[16..19] the unused parts (kr, kt, wr, wt), ARGV[20]
-- the key's record.
local LK, LW = KEYS[5], KEYS[6]
local function rget(key, hkey, now, rrate, trate)
  if hkey == LW then
    return lload(key, hkey, now, rrate, trate, ARGV[15], tonumber(ARGV[18]), tonumber(ARGV[19]))
  end
  return lload(key, hkey, now, rrate, trate, ARGV[20], tonumber(ARGV[16]), tonumber(ARGV[17]))
end
local function rput(key, e, rrate, trate, l, now)
  lstore(key, e, rrate, trate, l[3], now)
end
