--[[
  Groups (tenants) of a pool: their ready items, turns, limits and pauses (rules GR1-GR9).

  Ungrouped items stay in the pool's 'ready' set as before; a grouped item,
  when ready, is in its group's set instead. Keys, after the pool's base:

    gr:<g>    group g's ready items (scores and members as in 'ready')
    gready    every grouped ready item (the same members): counts, order, listing
    gl:<g>    g's claims scored by lease expiry; in flight = ZCOUNT (now, +inf],
              so an expired lease stops counting at its expiry
    gqp       the priorities at which the turn index holds a group (score -priority)
    gq:<p>    the turn index at priority p: the groups whose best ready item has
              priority p, scored by virtual time (vt); ties sort by name
    gpaused   groups taken out of the index while paused, scored by the pause's end
    gfull     groups taken out of the index at their limit (back when a slot frees)
    g:<g>     g's hash (GROUP_FIELDS in keys.py)
    gpool     the pool's groups hash (GROUP_POOL_FIELDS in keys.py)
    gpl       the pool limit, a plain key: a claim's fast path checks it and gqp
              with one EXISTS, so a pool without groups claims as before
    gwait     group -> its PENDING items not yet due (for group_report)
    gknown    every group an item or a setting named (group_report lists from it)

  A claim serves the index's group with the smallest vt at the highest
  priority (claim.lua), then moves its vt to max(vt, pool vt) + 1/weight:
  a group that was idle starts at the pool's turn and banks no credit.
  Pauses and limits are checked when a group's turn comes: a paused group
  or one at its limit leaves the index (gpaused, gfull) and comes back when
  the pause ends (settle) or a slot frees (claim_freed), so no claim scans
  every group.
]]

-- The group's place in the index, from its best ready item (none when parked or empty).
local function group_sync(base, group)
  local state = base .. 'g:' .. group
  local f = redis.call('HMGET', state, 'ix', 'pk', 'vt')
  local want = false
  if not f[2] then
    local head = redis.call('ZRANGE', base .. 'gr:' .. group, 0, 0, 'WITHSCORES')
    if #head > 0 then
      want = string.format('%.17g', -tonumber(head[2]) + 0) -- + 0: never '-0'
    end
  end
  if f[1] == want then
    return
  end
  if f[1] then
    local level = base .. 'gq:' .. f[1]
    redis.call('ZREM', level, group)
    if redis.call('EXISTS', level) == 0 then
      redis.call('ZREM', base .. 'gqp', f[1])
    end
  end
  if want then
    redis.call('ZADD', base .. 'gq:' .. want, f[3] or 0, group)
    redis.call('ZADD', base .. 'gqp', -tonumber(want), want)
    redis.call('HSET', state, 'ix', want)
  else
    redis.call('HDEL', state, 'ix')
  end
end

-- Take the group out of the index (before its vt changes, so that sync puts it back re-scored).
local function group_unindex(base, group)
  local state = base .. 'g:' .. group
  local at = redis.call('HGET', state, 'ix')
  if at then
    local level = base .. 'gq:' .. at
    redis.call('ZREM', level, group)
    if redis.call('EXISTS', level) == 0 then
      redis.call('ZREM', base .. 'gqp', at)
    end
    redis.call('HDEL', state, 'ix')
  end
end

local function group_ready_add(base, group, priority, member)
  redis.call('ZADD', base .. 'gr:' .. group, -priority, member)
  redis.call('ZADD', base .. 'gready', -priority, member)
  group_sync(base, group)
end

local function group_ready_remove(base, group, member)
  if redis.call('ZREM', base .. 'gr:' .. group, member) == 1 then
    redis.call('ZREM', base .. 'gready', member)
    group_sync(base, group)
  end
end

-- Count the group's items not yet due (delta +1 or -1); the field goes at 0.
local function group_wait(base, group, delta)
  if redis.call('HINCRBY', base .. 'gwait', group, delta) <= 0 then
    redis.call('HDEL', base .. 'gwait', group)
  end
end

-- The limit that binds a named group: its own, else the pool's default (false: none).
local function group_limit(base, own)
  if own then
    return tonumber(own)
  end
  local default = redis.call('HGET', base .. 'gpool', 'dl')
  return default and tonumber(default)
end

-- A claim ended (completed, failed, released, cancelled, expired); `group` false: ungrouped.
-- Its slot is free, so a group parked at its limit takes turns again, and
-- workers waiting on the group's or the pool's limit are woken.
local function claim_freed(base, group, id)
  local wake = redis.call('EXISTS', base .. 'gpl') == 1
  if group then
    redis.call('ZREM', base .. 'gl:' .. group, id)
    local state = base .. 'g:' .. group
    if redis.call('HGET', state, 'pk') == 'l' then
      redis.call('HDEL', state, 'pk')
      redis.call('SREM', base .. 'gfull', group)
      group_sync(base, group)
      wake = true
    end
  end
  if wake then
    redis.call('PUBLISH', base .. 'wake', '1')
  end
end

-- Park a group out of the index: why 'p' (paused, until `ends`) or 'l' (at its limit).
local function group_park(base, group, why, ends)
  group_unindex(base, group)
  redis.call('HSET', base .. 'g:' .. group, 'pk', why)
  if why == 'p' then
    redis.call('ZADD', base .. 'gpaused', ends, group)
  else
    redis.call('SADD', base .. 'gfull', group)
  end
end

-- Bring a parked group back to the index (its pause ended, its limit changed).
local function group_unpark(base, group)
  local state = base .. 'g:' .. group
  local why = redis.call('HGET', state, 'pk')
  if why == 'p' then
    redis.call('ZREM', base .. 'gpaused', group)
  elseif why == 'l' then
    redis.call('SREM', base .. 'gfull', group)
  end
  if why then
    redis.call('HDEL', state, 'pk')
    group_sync(base, group)
  end
end
