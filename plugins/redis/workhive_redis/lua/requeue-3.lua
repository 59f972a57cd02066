--[[
  requeue: POISONED items back to PENDING, available now, attempts 0, the
  error kept; their dedup keys are held again (unless a live item took one).
  CANCELLED items (the pool's cancelled set) come back too, by id only.

  KEYS[1] ready
  KEYS[2] dead
  KEYS[3] dedup
  ARGV[1] clock offset
  ARGV[2] the pool's wake channel
  ARGV[3..] item ids; none = every poisoned item

  Returns how many were requeued (a repeated or unknown id counts nothing).
]]
--- @include "clock"
--- @include "ready"
--- @include "settle"
local base = pool_base(KEYS[1])
local now = now(ARGV[1])
settle(base, now)
local ids = {}
if #ARGV > 2 then
  for i = 3, #ARGV do
    ids[#ids + 1] = ARGV[i]
  end
else
  ids = redis.call('ZRANGE', KEYS[2], 0, -1)
end
local count = 0
for _, id in ipairs(ids) do
  if redis.call('ZREM', KEYS[2], id) == 1 or (#ARGV > 2 and redis.call('ZREM', base .. 'cancelled', id) == 1) then
    local item = base .. 'i:' .. id
    redis.call('HSET', item, 'st', 'pending', 'at', 0, 'aa', num(now))
    redis.call('HDEL', item, 'fa', 'cb', 'le', 'ls')
    local key = redis.call('HGET', item, 'dk')
    if key then
      redis.call('HSETNX', KEYS[3], key, id)
    end
    local f = redis.call('HMGET', item, 'pr', 'gr')
    enqueue(base, id, tonumber(f[1]), now, now, f[2])
    count = count + 1
  end
end
if count > 0 then
  redis.call('PUBLISH', ARGV[2], '1')
end
return count
