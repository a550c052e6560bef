local v = redis.call("GET", KEYS[2]) return 1
