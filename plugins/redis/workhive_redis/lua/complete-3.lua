--[[
  complete: finish claimed items (a batch of acks), each checked on its own.

  KEYS[1] ready
  KEYS[2] leases
  KEYS[3] done
  ARGV[1] clock offset
  ARGV[2..] three per ack: item id, fencing token, result JSON ('' = none)

  Returns one integer per ack: 1 done, 0 refused (not CLAIMED, another
  token, or the lease expired) and nothing changed for it.
]]
--- @include "clock"
--- @include "ready"
--- @include "fenced"
local base = pool_base(KEYS[1])
local now = now(ARGV[1])
return complete_all(base, ARGV, 2, now)
