-- A reconcile's arguments (reconcile.lua's ARGV[1..10]).
local now = now_us(ARGV[1])
local est = tonumber(ARGV[2])
local ka, wa = tonumber(ARGV[3]), tonumber(ARGV[4])
local krr, ktr, wrr, wtr = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local refund = ARGV[10] == "1"
-- charge ("c"): the charge of an admission the local fallback decided while
-- Redis did not answer (charges.go): one request more is debited from each
-- per-minute requests bucket, the estimate (ARGV[2]) is 0 and the actuals
-- are the whole charge.
local charge = ARGV[10] == "c"
