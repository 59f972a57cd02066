--[[
  extend: move a live claim's lease to now + lease; the new length becomes
  the item's, so heartbeats keep extending by it.

  KEYS[1] ready (names the pool)
  KEYS[2] leases
  ARGV[1] clock offset
  ARGV[2] item id
  ARGV[3] fencing token
  ARGV[4] lease seconds

  Returns the new expiry (text), or 0 when the claim is not live (nothing changed).
]]
--- @include "clock"
--- @include "ready"
--- @include "fenced"
local base = pool_base(KEYS[1])
local now = now(ARGV[1])
local item = base .. 'i:' .. ARGV[2]
if not holds(item, ARGV[3], now) then
  return 0
end
local expires = num(now + tonumber(ARGV[4]))
redis.call('HSET', item, 'le', expires, 'ls', num(tonumber(ARGV[4])))
redis.call('ZADD', KEYS[2], expires, ARGV[2])
local group = redis.call('HGET', item, 'gr')
if group then -- the group counts the claim in flight until the new expiry
  redis.call('ZADD', base .. 'gl:' .. group, expires, ARGV[2])
end
return expires
