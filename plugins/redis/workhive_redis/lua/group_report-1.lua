--[[
  group_report: the pool's group settings and, per group, its counts
  (GroupReport; rule GR9), settled to the server's clock first.

  KEYS[1] ready (names the pool)
  ARGV[1] clock offset

  Returns {pool limit or false, default limit or false, then seven per group:
  name ('' = the ungrouped items, listed first when it has live items),
  weight, own limit or false, in flight, ready, waiting, paused until or false}.
  Named groups come in name order: each with a live item or a setting of its
  own. A group with neither (and not parked) is forgotten here, so the set of
  known groups does not grow with every tenant that ever pushed.
]]
--- @include "clock"
--- @include "ready"
--- @include "settle"
local base = pool_base(KEYS[1])
local now = now(ARGV[1])
settle(base, now)
local after = '(' .. num(now)
local out = {redis.call('GET', base .. 'gpl') or false, redis.call('HGET', base .. 'gpool', 'dl') or false}
local named = {}
local grouped_flight, grouped_waiting = 0, 0
local known = redis.call('SMEMBERS', base .. 'gknown')
table.sort(known)
for _, group in ipairs(known) do
  local state = base .. 'g:' .. group
  local f = redis.call('HMGET', state, 'w', 'l', 'pu', 'pk')
  local flight = redis.call('ZCOUNT', base .. 'gl:' .. group, after, '+inf')
  local ready = redis.call('ZCARD', base .. 'gr:' .. group)
  local waiting = tonumber(redis.call('HGET', base .. 'gwait', group) or '0')
  local claimed = redis.call('ZCARD', base .. 'gl:' .. group)
  local paused = f[3] and tonumber(f[3]) > now and f[3] or false
  grouped_flight = grouped_flight + flight
  grouped_waiting = grouped_waiting + waiting
  if ready + waiting + claimed > 0 or f[1] or f[2] or paused then
    for _, v in ipairs({group, f[1] or '1', f[2] or false, flight, ready, waiting, paused}) do
      named[#named + 1] = v
    end
  elseif not f[4] then
    redis.call('SREM', base .. 'gknown', group)
    redis.call('DEL', state)
  end
end
local flight = redis.call('ZCOUNT', base .. 'leases', after, '+inf') - grouped_flight
local ready = redis.call('ZCARD', KEYS[1])
local waiting = redis.call('ZCARD', base .. 'delayed') - grouped_waiting
if flight + ready + waiting > 0 then
  for _, v in ipairs({'', '1', false, flight, ready, waiting, false}) do
    out[#out + 1] = v
  end
end
for _, v in ipairs(named) do
  out[#out + 1] = v
end
return out
