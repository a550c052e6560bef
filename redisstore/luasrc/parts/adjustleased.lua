-- adjust applies a reconcile to entry e with leases out: a credit stops
-- at the capacity less what is out on lease (leased, rleased: 0 without
-- leases).
local function adjust(e, actual, cap, leased, rcap, rleased)
  if refund then
    e[2] = e[2] + 1
    if e[2] >= rcap - rleased then e[2], e[3] = rcap - rleased, 0 end
    actual = 0
  elseif charge then
    e[2] = e[2] - 1
    if e[2] < -2 * rcap then e[2] = -2 * rcap end
  end
  local l = e[4] - (actual - est)
  if actual > est and l < -2 * cap then l = -2 * cap end
  if l >= cap - leased then -- lload left the level at most there
    l = cap - leased
    e[5] = 0
  end
  e[4] = l
end
