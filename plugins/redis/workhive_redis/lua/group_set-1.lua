--[[
  group_set: change one group setting of a pool (kept also while the pool or
  group has no items). The facade has checked the values already.

  KEYS[1] ready (names the pool)
  ARGV[1] clock offset
  ARGV[2] what: 'weight', 'limit' (a group's own), 'default' (every named
          group's without its own), 'pool' (the pool's limit) or 'pause'
  ARGV[3] the group ('' for 'default' and 'pool')
  ARGV[4] the value: weight, limit or pause seconds; '' removes the setting
          (a limit) or resumes the group (a pause)

  Groups parked at a limit come back to the turn index when a limit they
  obey changes (the next claim parks them again if they are still full);
  workers waiting for work are woken. Returns 1.
]]
--- @include "clock"
--- @include "ready"
local base = pool_base(KEYS[1])
local what, group, value = ARGV[2], ARGV[3], ARGV[4]
local state = base .. 'g:' .. group
if group ~= '' then
  redis.call('SADD', base .. 'gknown', group)
end
if what == 'weight' then
  redis.call('HSET', state, 'w', value)
elseif what == 'limit' then
  if value == '' then
    redis.call('HDEL', state, 'l')
  else
    redis.call('HSET', state, 'l', value)
  end
  if redis.call('HGET', state, 'pk') == 'l' then
    group_unpark(base, group)
  end
elseif what == 'default' then
  if value == '' then
    redis.call('HDEL', base .. 'gpool', 'dl')
  else
    redis.call('HSET', base .. 'gpool', 'dl', value)
  end
  for _, full in ipairs(redis.call('SMEMBERS', base .. 'gfull')) do
    group_unpark(base, full)
  end
elseif what == 'pool' then
  if value == '' then
    redis.call('DEL', base .. 'gpl')
  else
    redis.call('SET', base .. 'gpl', value)
  end
elseif what == 'pause' then
  if value == '' then
    redis.call('HDEL', state, 'pu')
    if redis.call('HGET', state, 'pk') == 'p' then
      group_unpark(base, group)
    end
  else
    local ends = num(now(ARGV[1]) + tonumber(value))
    redis.call('HSET', state, 'pu', ends)
    if redis.call('HGET', state, 'pk') == 'p' then
      redis.call('ZADD', base .. 'gpaused', ends, group) -- a parked group now waits for the new end
    end
  end
else
  return redis.error_reply('WORKHIVE group_set: unknown setting ' .. what)
end
redis.call('PUBLISH', base .. 'wake', '1')
return 1
