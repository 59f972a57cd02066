--[[
  extend_held: a worker's heartbeat reaches its claims in this pool: every
  unexpired lease it holds moves to now + that item's lease length.

  KEYS[1] leases
  KEYS[2] the worker's held set in this pool
  ARGV[1] clock offset
  ARGV[2] worker id
  ARGV[3] the pool's key prefix

  Returns how many leases were extended. Expired ones are left for settle().
]]
--- @include "clock"
local now = now(ARGV[1])
local base = ARGV[3]
local count = 0
for _, id in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  local item = base .. 'i:' .. id
  local f = redis.call('HMGET', item, 'st', 'cb', 'le', 'ls', 'gr')
  if f[1] == 'claimed' and f[2] == ARGV[2] then
    if tonumber(f[3]) > now then
      local expires = num(now + tonumber(f[4]))
      redis.call('HSET', item, 'le', expires)
      redis.call('ZADD', KEYS[1], expires, id)
      if f[5] then -- the group counts the claim in flight until the new expiry
        redis.call('ZADD', base .. 'gl:' .. f[5], expires, id)
      end
      count = count + 1
    end
  else
    redis.call('SREM', KEYS[2], id)
  end
end
return count
