--[[
  state_get: a key's value, or nil when absent or expired (read only).

  KEYS[1] the namespace's values
  KEYS[2] its expiry times
  ARGV[1] clock offset
  ARGV[2] key
]]
--- @include "clock"
local expires = redis.call('ZSCORE', KEYS[2], ARGV[2])
if expires and tonumber(expires) <= now(ARGV[1]) then
  return false
end
return redis.call('HGET', KEYS[1], ARGV[2])
