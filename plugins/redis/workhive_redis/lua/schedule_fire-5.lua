--[[
  schedule_fire: record that a schedule fired a tick and push the tick's item, atomically.

  KEYS[1] ready
  KEYS[2] delayed
  KEYS[3] seq (item counter of the pool)
  KEYS[4] n (items in the pool)
  KEYS[5] ticks (the pool's hash: schedule field -> the latest tick it fired)
  ARGV[1] clock offset
  ARGV[2] the pool's number (allocated once by pool_index-2.lua)
  ARGV[3] the pool's wake channel
  ARGV[4] the schedule's field in the ticks hash (its name and creation time: workhive_redis.schedules)
  ARGV[5] the tick (seconds since the epoch, as text that reads back exactly)
  ARGV[6] payload
  ARGV[7] priority
  ARGV[8] delay
  ARGV[9] max_attempts

  The record lives in the pool's slot (every key here shares the pool's hash
  tag), so one script sees it and pushes. When the field holds this tick or a
  later one, nothing changes and the reply is false; else the field becomes
  this tick, one PENDING item is pushed as push-5.lua pushes one without a
  dedup key, and the reply is its id.
]]
--- @include "clock"
--- @include "ready"
local tick = tonumber(ARGV[5])
local last = redis.call('HGET', KEYS[5], ARGV[4])
if last and tonumber(last) >= tick then
  return false
end
redis.call('HSET', KEYS[5], ARGV[4], ARGV[5])
local base = pool_base(KEYS[1])
local now = now(ARGV[1])
local seq = redis.call('INCR', KEYS[3])
local id = string.format('i%06x%010x', tonumber(ARGV[2]), seq)
local priority = tonumber(ARGV[7])
local available_at = now + tonumber(ARGV[8])
redis.call('HSET', base .. 'i:' .. id, 'p', ARGV[6], 'st', 'pending', 'pr', ARGV[7], 'at', 0, 'ma', ARGV[9],
  'tk', 0, 'ca', num(now), 'aa', num(available_at), 'rl', 0)
redis.call('INCRBY', KEYS[4], 1)
if enqueue(base, id, priority, available_at, now, false) then
  redis.call('PUBLISH', ARGV[3], '1')
end
return id
