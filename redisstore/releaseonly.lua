-- Releases an admission's slots (release.lua's first half), for a
-- reconcile with leases, which goes to its lease script (or is absorbed
-- by this process's leases) on its own. KEYS: the key's and the
-- workspace's gauges; ARGV[1]: the admission's ID.
redis.call("ZREM", KEYS[1], ARGV[1])
redis.call("ZREM", KEYS[2], ARGV[1])
return 1
