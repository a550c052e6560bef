-- A reconcile that also releases its admission's slots (admitx.lua), in
-- front of reconcile.lua: KEYS[3] and KEYS[4] are the key's and the
-- workspace's gauges, KEYS[5] (optional) the reconcile's identity record;
-- ARGV[12] is the admission's ID. The slots go whether or not the
-- reconcile was applied before: removing an ID that holds none (released
-- already, or expired) removes nothing, so a release happens at most once.
redis.call("ZREM", KEYS[3], ARGV[12])
redis.call("ZREM", KEYS[4], ARGV[12])
local RID = KEYS[5]
