-- KEYS[1]: the key's entry, KEYS[2]: the workspace's entry (one hash slot).
-- ARGV: now_us ("" = server TIME), then the request as admit_one takes it.
-- Returns {allowed, refused, retry_s, never, kr, kt, wr, wt}.
return admit_one(KEYS[1], KEYS[2], now_us(ARGV[1]), ARGV, 2)
