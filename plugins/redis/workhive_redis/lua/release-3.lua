--[[
  release: give a claim back without spending its attempt (shutdowns, rate
  limits): PENDING again after `delay` seconds, attempts - 1, releases + 1.

  KEYS[1] ready
  KEYS[2] delayed
  KEYS[3] leases
  ARGV[1] clock offset
  ARGV[2] item id
  ARGV[3] fencing token
  ARGV[4] delay seconds
  ARGV[5] the pool's wake channel

  Returns 1, or 0 when the claim is not live (nothing changed).
]]
--- @include "clock"
--- @include "ready"
--- @include "fenced"
local base = pool_base(KEYS[1])
local now = now(ARGV[1])
local id = ARGV[2]
local item = base .. 'i:' .. id
if not holds(item, ARGV[3], now) then
  return 0
end
finish_claim(base, item, id)
local available_at = now + tonumber(ARGV[4])
redis.call('HINCRBY', item, 'at', -1)
redis.call('HINCRBY', item, 'rl', 1)
redis.call('HSET', item, 'st', 'pending', 'aa', num(available_at))
redis.call('HDEL', item, 'cb', 'le', 'ls')
local f = redis.call('HMGET', item, 'pr', 'gr')
if enqueue(base, id, tonumber(f[1]), available_at, now, f[2]) then
  redis.call('PUBLISH', ARGV[5], '1')
end
return 1
