redis.call("SET", KEYS[1], "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", "KEEPTTL") return 1
