-- KEYS[1]: the key's entry, KEYS[2]: the workspace's entry (one hash slot),
-- KEYS[3] (optional): the admission's identity record (admit_id).
-- ARGV[1]: now_us ("" = server TIME), ARGV[2]: the request (admit_one's
-- ADMIT), ARGV[3]: the identity record's life in ms.
-- Returns {allowed, refused, retry_s, never, kr, kt, wr, wt}.
return admit_id(KEYS[1], KEYS[2], KEYS[3] or "", now_us(ARGV[1]), ARGV[2], ARGV[3])
