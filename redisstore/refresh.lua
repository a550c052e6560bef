-- Refreshes a live process's slots (one hash slot's gauges): KEYS[i] is a
-- gauge, ARGV[i + 1] the admission ID holding a slot there, ARGV[1] a
-- slot's life in ms. A slot still held gets a new expiry, a slot's life
-- from now on the server's clock; one already gone (released, or expired)
-- is not added back (XX).
local t = redis.call("TIME")
local life = tonumber(ARGV[1])
local exp = tonumber(t[1]) * 1000000 + tonumber(t[2]) + life * 1000
for i = 1, #KEYS do
  if redis.call("ZADD", KEYS[i], "XX", "CH", exp, ARGV[i + 1]) == 1 then
    redis.call("PEXPIRE", KEYS[i], life + 1000)
  end
end
return 1
