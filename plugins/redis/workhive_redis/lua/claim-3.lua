--[[
  claim: take up to `limit` claimable items, in claim order (priority, then
  available_at, then id), each with its own lease and fencing token.

  KEYS[1] ready
  KEYS[2] delayed
  KEYS[3] leases
  ARGV[1] clock offset
  ARGV[2] worker id
  ARGV[3] limit
  ARGV[4] lease seconds

  Returns what claim() in includes/claim.lua returns (empty: nothing claimable).
]]
--- @include "clock"
--- @include "ready"
--- @include "settle"
--- @include "claim"
local base = pool_base(KEYS[1])
return claim(base, ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), now(ARGV[1]))
