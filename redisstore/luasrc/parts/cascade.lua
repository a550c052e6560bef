-- The refusal cascade of the four per-minute buckets: refused is the first
-- without room for one request (kr, wr) or n tokens (kt, wt), -1 if none.
local refused = -1
if kr < 1 then
  refused = 0
elseif kt < n then
  refused = 1
elseif wr < 1 then
  refused = 2
elseif wt < n then
  refused = 3
end
