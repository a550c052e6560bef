-- admit.lua's read of one entry, v from wkey here (last, rl, rf, tl, tf,
-- and exp when admit.lua wrote it on the server's TIME): created full at
-- now when absent; its time moved to now, or kept when the clock went
-- backwards, which refills nothing.
if v then
  if #v == 48 then
    wl, wr, wrf, wt, wtf, wexp = struct.unpack("<dddddd", v)
  else
    wl, wr, wrf, wt, wtf = struct.unpack("<ddddd", v)
  end
  local dt = now - wl
  if dt > 0 then wl = now end
  wr, wrf = refill(wr, wrf, wrr, 2 * wrr, dt)
  wt, wtf = refill(wt, wtf, wtr, 2 * wtr, dt)
else
  wl, wr, wrf, wt, wtf = now, 2 * wrr, 0, 2 * wtr, 0
end
