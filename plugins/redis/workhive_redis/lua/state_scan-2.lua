--[[
  state_scan: every live key and value of a namespace (read only).

  KEYS[1] the namespace's values
  KEYS[2] its expiry times
  ARGV[1] clock offset

  Returns a flat list key, value, ... (expired keys left out).
]]
--- @include "clock"
local now = now(ARGV[1])
local out = {}
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local expires = redis.call('ZSCORE', KEYS[2], all[i])
  if not expires or tonumber(expires) > now then
    out[#out + 1] = all[i]
    out[#out + 1] = all[i + 1]
  end
end
return out
