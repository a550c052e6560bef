-- KEYS[1]: the key's entry, KEYS[2]: the workspace's entry (one hash slot).
-- ARGV[1]: now_us ("" = server TIME), ARGV[2]: the request (admit_one's
-- ADMIT).
-- Returns {allowed, refused, retry_s, never, kr, kt, wr, wt}.
return admit_one(KEYS[1], KEYS[2], now_us(ARGV[1]), ARGV[2])
