--[[
  step_put: store a durable step of an item (ctx.step) under its live claim.

  KEYS[1] ready (names the pool)
  KEYS[2] the item's steps ({prefix/pool}:steps:<id>, a hash: step key -> record)
  ARGV[1] clock offset
  ARGV[2] item id
  ARGV[3] fencing token
  ARGV[4] step key
  ARGV[5] result (JSON text)
  ARGV[6] '1' if the step failed permanently, else '0'

  A record is "<n>\t<failed>\t<token>\t<stored_at>\t<result>": n numbers the
  item's steps in store order (JSON text never holds a raw tab, so the result
  goes last, whole). A key stored already keeps its first value.

  Returns 1 when the claim is live (stored, or kept), 0 otherwise (nothing changed).
]]
--- @include "clock"
--- @include "ready"
--- @include "fenced"
local base = pool_base(KEYS[1])
local now = now(ARGV[1])
if not holds(base .. 'i:' .. ARGV[2], ARGV[3], now) then
  return 0
end
if redis.call('HEXISTS', KEYS[2], ARGV[4]) == 1 then
  return 1
end
local n = redis.call('HLEN', KEYS[2]) + 1
redis.call('HSET', KEYS[2], ARGV[4], n .. '\t' .. ARGV[6] .. '\t' .. ARGV[3] .. '\t' .. num(now) .. '\t' .. ARGV[5])
return 1
