--[[
  fail: a claimed item failed. Keeps the error; POISONED when asked to or
  when its attempts are spent, else PENDING again after `retry_in` seconds.

  KEYS[1] ready
  KEYS[2] delayed
  KEYS[3] leases
  KEYS[4] dead
  ARGV[1] clock offset
  ARGV[2] item id
  ARGV[3] fencing token
  ARGV[4] error text
  ARGV[5] retry_in seconds
  ARGV[6] '1' to poison
  ARGV[7] the pool's wake channel

  Returns 'poisoned' or 'pending', or 0 when the claim is not live (nothing changed).
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
local f = redis.call('HMGET', item, 'at', 'ma', 'pr', 'gr')
if ARGV[6] == '1' or tonumber(f[1]) >= tonumber(f[2]) then
  poison(base, item, id, ARGV[4], now)
  return 'poisoned'
end
local available_at = now + tonumber(ARGV[5])
redis.call('HSET', item, 'st', 'pending', 'er', ARGV[4], 'aa', num(available_at))
redis.call('HDEL', item, 'cb', 'le', 'ls')
if enqueue(base, id, tonumber(f[3]), available_at, now, f[4]) then
  redis.call('PUBLISH', ARGV[7], '1')
end
return 'pending'
