redis.call("SET", KEYS[2], "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", "PX", 5000) return 1
