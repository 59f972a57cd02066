--[[
  due: how long until something in the pool is claimable (read only).

  KEYS[1] ready
  KEYS[2] delayed
  KEYS[3] leases
  ARGV[1] clock offset

  Returns seconds as text: '0' when an item is ready now, the wait until
  the next delayed item or lease expiry, or '-1' when nothing will be.
]]
--- @include "clock"
if redis.call('ZCARD', KEYS[1]) > 0 then
  return '0'
end
local now = now(ARGV[1])
local soonest = false
for _, set in ipairs({KEYS[2], KEYS[3]}) do
  local first = redis.call('ZRANGE', set, 0, 0, 'WITHSCORES')
  if #first > 0 then
    local at = tonumber(first[2])
    if not soonest or at < soonest then
      soonest = at
    end
  end
end
if not soonest then
  return '-1'
end
return num(math.max(0, soonest - now))
