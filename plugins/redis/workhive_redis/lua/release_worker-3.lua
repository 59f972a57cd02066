--[[
  release_worker: put every item a worker holds in this pool back to
  PENDING, available now (its worker stopped, or was declared lost).

  KEYS[1] ready
  KEYS[2] leases
  KEYS[3] the worker's held set in this pool
  ARGV[1] clock offset
  ARGV[2] worker id
  ARGV[3] '1' to spend the attempt
  ARGV[4] the pool's wake channel

  With the attempt spent, an item whose attempts are used up is POISONED;
  without, the attempt is refunded (attempts - 1, releases + 1).
  Returns {released, poisoned}.
]]
--- @include "clock"
--- @include "ready"
local base = pool_base(KEYS[1])
local now = now(ARGV[1])
local worker = ARGV[2]
local spend = ARGV[3] == '1'
local released, poisoned = 0, 0
for _, id in ipairs(redis.call('SMEMBERS', KEYS[3])) do
  local item = base .. 'i:' .. id
  local f = redis.call('HMGET', item, 'st', 'cb', 'at', 'ma', 'pr', 'gr')
  if f[1] == 'claimed' and f[2] == worker then
    redis.call('ZREM', KEYS[2], id)
    claim_freed(base, f[6], id)
    local attempts, max_attempts = tonumber(f[3]), tonumber(f[4])
    if spend and attempts >= max_attempts then
      poison(base, item, id, 'worker ' .. worker .. ' was lost holding it on attempt ' .. attempts
        .. ' of ' .. max_attempts, now)
      poisoned = poisoned + 1
    else
      if not spend then
        redis.call('HINCRBY', item, 'at', -1)
        redis.call('HINCRBY', item, 'rl', 1)
      end
      redis.call('HSET', item, 'st', 'pending', 'aa', num(now))
      redis.call('HDEL', item, 'cb', 'le', 'ls')
      enqueue(base, id, tonumber(f[5]), now, now, f[6])
      released = released + 1
    end
  end
end
redis.call('DEL', KEYS[3])
if released > 0 then
  redis.call('PUBLISH', ARGV[4], '1')
end
return {released, poisoned}
