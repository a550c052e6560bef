-- The four buckets' waits (wait): retry the longest, never 1 when some
-- bucket can never hold the request.
local retry, never = 0, 0
local s, nv = wait(kr, krf, 1, krr, 2 * krr)
if s > retry then retry = s end
if nv then never = 1 end
s, nv = wait(kt, ktf, n, ktr, 2 * ktr)
if s > retry then retry = s end
if nv then never = 1 end
s, nv = wait(wr, wrf, 1, wrr, 2 * wrr)
if s > retry then retry = s end
if nv then never = 1 end
s, nv = wait(wt, wtf, n, wtr, 2 * wtr)
if s > retry then retry = s end
if nv then never = 1 end
