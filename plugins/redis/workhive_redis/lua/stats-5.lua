--[[
  stats: the pool's counts, settled to the server's clock first.

  KEYS[1] ready
  KEYS[2] delayed
  KEYS[3] leases
  KEYS[4] done
  KEYS[5] dead
  ARGV[1] clock offset

  Returns {ready, delayed, claimed, done, poisoned, oldest ready available_at or false,
  cancelled} (the cancelled set is named from the pool's base, beside the others).
  Ready counts the ungrouped and the grouped ready items ('ready' and 'gready').
  The oldest ready item is the earliest head among the priority levels of
  both (each level is in available_at order), so this reads one item per level.
]]
--- @include "clock"
--- @include "ready"
--- @include "settle"
local base = pool_base(KEYS[1])
local now = now(ARGV[1])
settle(base, now)
local oldest = false
for _, set in ipairs({KEYS[1], base .. 'gready'}) do
  local head = redis.call('ZRANGE', set, 0, 0, 'WITHSCORES')
  while #head > 0 do
    local at = redis.call('HGET', base .. 'i:' .. string.sub(head[1], 15), 'aa')
    if at and (not oldest or tonumber(at) < tonumber(oldest)) then
      oldest = at
    end
    head = redis.call('ZRANGEBYSCORE', set, '(' .. head[2], '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  end
end
return {redis.call('ZCARD', KEYS[1]) + redis.call('ZCARD', base .. 'gready'), redis.call('ZCARD', KEYS[2]), redis.call('ZCARD', KEYS[3]),
  redis.call('ZCARD', KEYS[4]), redis.call('ZCARD', KEYS[5]), oldest, redis.call('ZCARD', base .. 'cancelled')}
