-- A plain reconcile's identity record (reconcile.lua): KEYS[3], if any.
local RID = KEYS[3]
