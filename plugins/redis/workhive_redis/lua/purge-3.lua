--[[
  purge: delete DONE, POISONED and CANCELLED items that finished more than
  `older_than` seconds ago, at most `limit` per call (the caller repeats).

  KEYS[1] done
  KEYS[2] dead
  KEYS[3] n (items in the pool)
  ARGV[1] clock offset
  ARGV[2] older_than seconds
  ARGV[3] limit
  ARGV[4] the pool's key prefix

  Returns how many were deleted.
]]
--- @include "clock"
local now = now(ARGV[1])
local cutoff = '(' .. num(now - tonumber(ARGV[2]))
local limit = tonumber(ARGV[3])
local base = ARGV[4]
local deleted = 0
for _, set in ipairs({KEYS[1], KEYS[2], base .. 'cancelled'}) do
  local ids = redis.call('ZRANGEBYSCORE', set, '-inf', cutoff, 'LIMIT', 0, limit - deleted)
  for _, id in ipairs(ids) do
    redis.call('DEL', base .. 'i:' .. id)
    redis.call('DEL', base .. 'steps:' .. id)  -- its durable steps go with it
    redis.call('ZREM', set, id)
  end
  deleted = deleted + #ids
end
if deleted > 0 then
  redis.call('DECRBY', KEYS[3], deleted)
end
return deleted
