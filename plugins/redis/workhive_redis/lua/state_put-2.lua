--[[
  state_put: set a key of a shared-state namespace, with an optional expiry
  on the server's clock; expired keys of the namespace are dropped on the way.

  KEYS[1] the namespace's values (hash)
  KEYS[2] its expiry times (sorted set)
  ARGV[1] clock offset
  ARGV[2] key
  ARGV[3] value
  ARGV[4] ttl seconds ('' = none)
]]
--- @include "clock"
local now = now(ARGV[1])
for _, key in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', num(now))) do
  redis.call('HDEL', KEYS[1], key)
  redis.call('ZREM', KEYS[2], key)
end
redis.call('HSET', KEYS[1], ARGV[2], ARGV[3])
if ARGV[4] == '' then
  redis.call('ZREM', KEYS[2], ARGV[2])
else
  redis.call('ZADD', KEYS[2], num(now + tonumber(ARGV[4])), ARGV[2])
end
return 1
