--[[
  heartbeat: a live worker says it is alive (its leases are extended pool
  by pool afterwards, by extend_held-2.lua, only when this succeeded).

  KEYS[1] the worker's record
  KEYS[2] beats
  ARGV[1] clock offset
  ARGV[2] worker id

  Returns {1, record fields...} (HGETALL order), {0} for an unknown worker,
  {-1, last heartbeat} for a worker declared lost (it must stop).
]]
--- @include "clock"
local status = redis.call('HGET', KEYS[1], 'st')
if not status then
  return {0}
end
if status == 'lost' then
  return {-1, redis.call('HGET', KEYS[1], 'hb')}
end
local now = num(now(ARGV[1]))
redis.call('HSET', KEYS[1], 'hb', now)
if status ~= 'stopped' then
  redis.call('ZADD', KEYS[2], now, ARGV[2])
end
local out = redis.call('HGETALL', KEYS[1])
table.insert(out, 1, 1)
return out
