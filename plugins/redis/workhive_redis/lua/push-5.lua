--[[
  push: store new PENDING items; returns their ids in order.

  KEYS[1] ready
  KEYS[2] delayed
  KEYS[3] seq (item counter of the pool)
  KEYS[4] dedup
  KEYS[5] n (items in the pool)
  ARGV[1] clock offset
  ARGV[2] the pool's number (allocated once by pool_index-2.lua)
  ARGV[3] the pool's wake channel
  ARGV[4..] six per item: payload, priority, delay, max_attempts, dedup_key ('' = none), group ('' = none)

  Returns the ids: "i" + 6 hex digits of the pool's number + 10 of the
  pool's INCR counter (workhive.ids: unique across the pools of a hive).
  With a dedup key held by a PENDING or CLAIMED item (also one pushed
  earlier in this batch), that item's id is returned and nothing is added.
  Publishes on the pool's wake channel when an item is ready now.
]]
--- @include "clock"
--- @include "ready"
local base = pool_base(KEYS[1])
local now = now(ARGV[1])
local pool_number = tonumber(ARGV[2])
local created = num(now)
local ids = {}
local added = 0
local ready = false
for i = 4, #ARGV, 6 do
  local key = ARGV[i + 4]
  local existing = false
  if key ~= '' then
    existing = redis.call('HGET', KEYS[4], key)
  end
  if existing then
    ids[#ids + 1] = existing
  else
    local seq = redis.call('INCR', KEYS[3])
    local id = string.format('i%06x%010x', pool_number, seq)
    local priority = tonumber(ARGV[i + 1])
    local available_at = now + tonumber(ARGV[i + 2])
    local item = base .. 'i:' .. id
    redis.call('HSET', item, 'p', ARGV[i], 'st', 'pending', 'pr', ARGV[i + 1], 'at', 0, 'ma', ARGV[i + 3],
      'tk', 0, 'ca', created, 'aa', num(available_at), 'rl', 0)
    if key ~= '' then
      redis.call('HSET', item, 'dk', key)
      redis.call('HSET', KEYS[4], key, id)
    end
    local group = ARGV[i + 5] ~= '' and ARGV[i + 5]
    if group then
      redis.call('HSET', item, 'gr', group)
      redis.call('SADD', base .. 'gknown', group)
    end
    if enqueue(base, id, priority, available_at, now, group) then
      ready = true
    end
    added = added + 1
    ids[#ids + 1] = id
  end
end
if added > 0 then
  redis.call('INCRBY', KEYS[5], added)
end
if ready then
  redis.call('PUBLISH', ARGV[3], '1')
end
return ids
