-- A reconcile's arguments (reconcile.lua's ARGV[1..10]).
local now = now_us(ARGV[1])
local est = tonumber(ARGV[2])
local ka, wa = tonumber(ARGV[3]), tonumber(ARGV[4])
local krr, ktr, wrr, wtr = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local refund = ARGV[10] == "1"
