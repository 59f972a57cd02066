--[[
  settle(base, now): bring the pool's indexes up to date with the clock.

  * Delayed items whose available_at has come move to the ready set (or
    their group's).
  * Expired leases are settled: an item with attempts left becomes PENDING,
    available since its lease expired (so it keeps its place in claim
    order); an item whose attempts are spent is POISONED instead, with an
    error saying the lease expired (a handler that kills its worker every
    time must not loop forever). Either way its slot is free (claim_freed).
  * Groups whose pause has ended take turns again.

  Bounded per call (SETTLE_MAX of each), so one script never holds the
  server for long; the rest is settled by the next call.
]]
local SETTLE_MAX = 1000

local function settle(base, now)
  local due = redis.call('ZRANGEBYSCORE', base .. 'delayed', '-inf', now, 'LIMIT', 0, SETTLE_MAX)
  for _, id in ipairs(due) do
    local item = base .. 'i:' .. id
    local f = redis.call('HMGET', item, 'pr', 'aa', 'gr')
    redis.call('ZREM', base .. 'delayed', id)
    if f[3] then
      group_wait(base, f[3], -1)
      group_ready_add(base, f[3], tonumber(f[1]), ready_member(tonumber(f[2]), id))
    else
      redis.call('ZADD', base .. 'ready', -tonumber(f[1]), ready_member(tonumber(f[2]), id))
    end
  end
  local expired = redis.call('ZRANGEBYSCORE', base .. 'leases', '-inf', now, 'LIMIT', 0, SETTLE_MAX)
  for _, id in ipairs(expired) do
    local item = base .. 'i:' .. id
    local f = redis.call('HMGET', item, 'at', 'ma', 'cb', 'le', 'pr', 'gr')
    local attempts, max_attempts, holder = tonumber(f[1]), tonumber(f[2]), f[3]
    redis.call('ZREM', base .. 'leases', id)
    if holder then
      redis.call('SREM', base .. 'held:' .. holder, id)
    end
    claim_freed(base, f[6], id)
    if attempts >= max_attempts then
      poison(base, item, id, 'lease expired after attempt ' .. attempts .. ' of ' .. max_attempts
        .. ' (worker ' .. (holder or '?') .. ' stopped heartbeating or crashed)', now)
    else
      redis.call('HSET', item, 'st', 'pending', 'aa', f[4])
      redis.call('HDEL', item, 'cb', 'le', 'ls')
      enqueue(base, id, tonumber(f[5]), tonumber(f[4]), now, f[6])
    end
  end
  for _, group in ipairs(redis.call('ZRANGEBYSCORE', base .. 'gpaused', '-inf', now, 'LIMIT', 0, SETTLE_MAX)) do
    group_unpark(base, group)
  end
end
