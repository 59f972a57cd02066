--[[
  cancel: each given PENDING or CLAIMED item becomes CANCELLED (rules Z1-Z3):
  out of the ready, delayed or leases set (and its holder's held set), finished
  now, lease fields dropped, holder and token kept, its dedup key freed, and
  into the pool's cancelled set (scored by finish time, like done and dead).
  Expired leases and due items are settled first, so a spent expired claim
  reads POISONED and is left alone.

  KEYS[1] ready
  KEYS[2] cancelled
  ARGV[1] clock offset
  ARGV[2..] item ids (distinct)

  Returns, per id, the state it was in, or '' when the pool has no such item.
]]
--- @include "clock"
--- @include "ready"
--- @include "settle"
local base = pool_base(KEYS[1])
local now = now(ARGV[1])
settle(base, now)
local out = {}
for i = 2, #ARGV do
  local id = ARGV[i]
  local item = base .. 'i:' .. id
  local f = redis.call('HMGET', item, 'st', 'aa', 'cb', 'gr')
  local state = f[1]
  if not state then
    out[#out + 1] = ''
  else
    out[#out + 1] = state
    if state == 'pending' or state == 'claimed' then
      if state == 'pending' then
        if f[4] then
          group_ready_remove(base, f[4], ready_member(tonumber(f[2]), id))
        else
          redis.call('ZREM', KEYS[1], ready_member(tonumber(f[2]), id))
        end
        if redis.call('ZREM', base .. 'delayed', id) == 1 and f[4] then
          group_wait(base, f[4], -1)
        end
      else
        redis.call('ZREM', base .. 'leases', id)
        if f[3] then
          redis.call('SREM', base .. 'held:' .. f[3], id)
        end
        claim_freed(base, f[4], id)
      end
      redis.call('HSET', item, 'st', 'cancelled', 'fa', num(now))
      redis.call('HDEL', item, 'le', 'ls')
      redis.call('ZADD', KEYS[2], now, id)
      dedup_release(base, item, id)
    end
  end
end
return out
