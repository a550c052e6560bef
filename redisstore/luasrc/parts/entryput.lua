-- admit.lua's write of one entry, at wkey here, px starting at 1000: to
-- live until time alone would have refilled it to full, with a second's
-- margin; on the server's TIME with its expiry kept (KEEPTTL) while exp
-- is late enough, else set EXTRA ms later.
if wr < 2 * wrr then px = math.ceil((2 * wrr - wr) * 60000 / wrr) + 1000 end
if wt < 2 * wtr then
  q = math.ceil((2 * wtr - wt) * 60000 / wtr) + 1000
  if q > px then px = q end
end
px = math.min(px, MAXPX)
if not timed then
  redis.call("SET", wkey, struct.pack("<ddddd", wl, wr, wrf, wt, wtf), "PX", px)
elseif wexp and now + px * 1000 <= wexp then
  redis.call("SET", wkey, struct.pack("<dddddd", wl, wr, wrf, wt, wtf, wexp), "KEEPTTL")
else
  px = px + EXTRA
  redis.call("SET", wkey, struct.pack("<dddddd", wl, wr, wrf, wt, wtf, now + px * 1000), "PX", px)
end
