redis.call("SET", KEYS[1], "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", "PX", 5000) return 1
