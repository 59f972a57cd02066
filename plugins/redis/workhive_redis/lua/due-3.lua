--[[
  due: how long until something in the pool is claimable (read only).

  KEYS[1] ready
  KEYS[2] delayed
  KEYS[3] leases
  ARGV[1] clock offset

  Returns seconds as text: '0' when an item is ready now (ungrouped, or a
  group in the turn index) and the pool limit leaves room, else the wait
  until the next delayed item, lease expiry or end of a group's pause
  (a completion that frees a slot wakes waiters: includes/groups.lua), or
  '-1' when nothing will be.
]]
--- @include "clock"
--- @include "ready"
local base = pool_base(KEYS[1])
local now = now(ARGV[1])
local pool_limit = redis.call('GET', base .. 'gpl')
local room = not pool_limit or redis.call('ZCOUNT', KEYS[3], '(' .. num(now), '+inf') < tonumber(pool_limit)
if room and (redis.call('ZCARD', KEYS[1]) > 0 or redis.call('EXISTS', base .. 'gqp') == 1) then
  return '0'
end
local soonest = false
for _, set in ipairs({KEYS[2], KEYS[3], base .. 'gpaused'}) do
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
