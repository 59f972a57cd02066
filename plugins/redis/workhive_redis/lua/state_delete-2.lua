--[[
  state_delete: remove a key; returns 1 if it was there and not expired.

  KEYS[1] the namespace's values
  KEYS[2] its expiry times
  ARGV[1] clock offset
  ARGV[2] key
]]
--- @include "clock"
local expires = redis.call('ZSCORE', KEYS[2], ARGV[2])
local existed = redis.call('HDEL', KEYS[1], ARGV[2])
redis.call('ZREM', KEYS[2], ARGV[2])
if existed == 1 and (not expires or tonumber(expires) > now(ARGV[1])) then
  return 1
end
return 0
