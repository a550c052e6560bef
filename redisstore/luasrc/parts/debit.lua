-- An admission's debit: one request and n tokens from each bucket; a solo
-- request's key and workspace are one entry, debited once.
if solo then
  wr, wt = wr - 1, wt - n
  kr, kt = wr, wt
else
  kr, kt = kr - 1, kt - n
  wr, wt = wr - 1, wt - n
end
