--[[
  complete_and_claim: complete one claim and, only if it was accepted, claim
  the next items, in one atomic step (one round trip per item of a worker loop).

  KEYS[1] ready
  KEYS[2] delayed
  KEYS[3] leases
  KEYS[4] done
  ARGV[1] clock offset
  ARGV[2] item id
  ARGV[3] fencing token
  ARGV[4] result JSON ('' = none)
  ARGV[5] worker id
  ARGV[6] limit
  ARGV[7] lease seconds

  Returns 0 when the ack was refused (nothing changed); else 1 followed by
  what claim() returns (claim.lua: turns, group and pool limits).
]]
--- @include "clock"
--- @include "ready"
--- @include "settle"
--- @include "claim"
--- @include "fenced"
local base = pool_base(KEYS[1])
local now = now(ARGV[1])
if complete(base, ARGV[2], ARGV[3], ARGV[4], now) == 0 then
  return 0
end
local claimed = claim(base, ARGV[5], tonumber(ARGV[6]), tonumber(ARGV[7]), now)
table.insert(claimed, 1, 1)
return claimed
