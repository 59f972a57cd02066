--[[
  claim(base, worker, limit, lease, now): take up to `limit` claimable items.

  Settles first (delayed items, expired leases, ended pauses), then takes
  items one turn at a time. Each gets state CLAIMED, its holder,
  attempts + 1, a fencing token from the pool's counter (so tokens rise
  across every claim of the pool, and always above any token the item
  had), and a lease ending at now + lease on the server's clock.

  Fast path: with no group in the turn index and no pool limit (one EXISTS),
  every ready item is ungrouped and the best `limit` come off 'ready' at once,
  as before groups existed. Otherwise each item is one turn (turns), a
  batch of n acting as n successive claims, within the pool limit.

  What it costs the server is mostly the number of redis.call()s, so a batch
  keeps in Lua what only this script changes while it runs and writes it
  once: the pool's virtual times (gpool), each served group's settings, vt
  and claims in flight (read once per batch, vt written back at the end), the
  token counter (GET once, SET once), and the indexes every taken item joins
  or leaves (ready, gready, leases, held:<worker>, gl:<group>). A served
  group whose next item has the same priority keeps its place in the index
  (one ZADD re-scores it); only a group whose level changes, that empties,
  pauses or fills goes through group_unindex / group_sync. A group alone in
  turn (the only one at the top level, no ungrouped item at that priority)
  takes its run of turns at that priority in one read and one ZREM: a backlog
  of one tenant cost 6 calls an item against an ungrouped pool's 2, now 2.
  The turns taken are exactly those of n single claims.

  Returns a flat array: the lease expiry, then per item
  id, payload, priority, attempts, max_attempts, token, created_at,
  available_at, dedup_key, error, releases, group.
]]

-- Claim the items taken off their ready sets (ids[i], of group groups[i]; false: ungrouped),
-- appending each to `out`: one HMGET and one HSET per item, each index written once.
local function take(base, ids, groups, worker, expires, lease_text, out)
  local n = #ids
  if n == 0 then
    return
  end
  local first = tonumber(redis.call('GET', base .. 'tokens') or '0')
  local of_group = {}
  for i = 1, n do
    local id, group = ids[i], groups[i]
    local item = base .. 'i:' .. id
    local f = redis.call('HMGET', item, 'p', 'pr', 'ma', 'ca', 'aa', 'dk', 'er', 'rl', 'at')
    local token, attempts = first + i, tonumber(f[9]) + 1
    redis.call('HSET', item, 'st', 'claimed', 'cb', worker, 'tk', token, 'at', attempts,
      'ls', lease_text, 'le', expires)
    if group then
      local list = of_group[group]
      if not list then
        list = {}
        of_group[group] = list
      end
      list[#list + 1] = id
    end
    local o = #out
    out[o + 1] = id
    out[o + 2] = f[1]
    out[o + 3] = f[2]
    out[o + 4] = attempts
    out[o + 5] = f[3]
    out[o + 6] = token
    out[o + 7] = f[4]
    out[o + 8] = f[5]
    out[o + 9] = f[6]
    out[o + 10] = f[7]
    out[o + 11] = f[8]
    out[o + 12] = group
  end
  redis.call('SET', base .. 'tokens', first + n)
  zadd_each(base .. 'leases', expires, ids)
  call_each('SADD', base .. 'held:' .. worker, ids)
  for group, list in pairs(of_group) do
    zadd_each(base .. 'gl:' .. group, expires, list)
  end
end

--[[
  turns(base, now, room, ids, groups): take up to `room` items by turns off
  their ready sets, appending their ids and groups (false: ungrouped) to
  ids/groups. Each turn: the best priority first (GR5), the head of 'ready'
  against the top level of the index; at equal priority the smaller vt (the
  ungrouped items' vt is gpool's uvt; ties go to them, sorting first). A
  served turn moves the served vt to max(vt, pool vt) + 1/weight and the
  pool's vt to max(pool vt, vt). A paused group or one at its limit is parked
  (out of the index) and the turn passes on; each pass parks or serves, so
  this ends.
]]
local function turns(base, now, room, ids, groups)
  local gp = redis.call('HMGET', base .. 'gpool', 'uvt', 'vt', 'dl')
  local uvt, pool_vt = tonumber(gp[1] or '0'), tonumber(gp[2] or '0')
  local uvt_moved, pool_vt_moved = false, false
  local default_limit = gp[3] and tonumber(gp[3])
  local from_ready = {} -- members taken off 'ready' (removed at the end)
  local from_groups = {} -- members taken off the groups' sets (removed from gready at the end)
  local plain = nil -- the head of 'ready' not taken yet (false: none); nil: to read
  local top = nil -- the index's top level (false: none); nil: to read (gqp may have changed)
  local known = {} -- group -> its settings, vt and claims in flight, read once per batch
  local crowded = nil -- the `top` read whose level holds more than one group

  local function advance(vt, weight)
    if vt > pool_vt then
      pool_vt = vt
      pool_vt_moved = true
    end
    return pool_vt + 1 / weight
  end

  -- Write a served group's vt to its hash before groups.lua reads it (group_sync) or parks it.
  local function flush(group, g)
    if g.moved then
      redis.call('HSET', base .. 'g:' .. group, 'vt', num(g.vt))
      g.moved = false
    end
  end

  -- One turn, or several in a row (a group alone in turn, see below), at most `left`: the members
  -- taken and their group (false: ungrouped); nil: nothing left; 'again': a group was parked or
  -- healed out of the index, look again.
  local function one(left)
    if plain == nil then
      local head = redis.call('ZRANGE', base .. 'ready', #from_ready, #from_ready, 'WITHSCORES')
      plain = #head > 0 and head
    end
    if top == nil then
      local level = redis.call('ZRANGE', base .. 'gqp', 0, 0, 'WITHSCORES')
      top = #level > 0 and level
    end
    local turn = false
    if top then
      turn = redis.call('ZRANGE', base .. 'gq:' .. top[1], 0, 0, 'WITHSCORES')
      if #turn == 0 then -- never left so by group_sync; heal rather than stop claiming
        redis.call('ZREM', base .. 'gqp', top[1])
        top = nil
        return 'again'
      end
      if plain then
        local sp, tp = tonumber(plain[2]), tonumber(top[2])
        if sp < tp or (sp == tp and uvt <= tonumber(turn[2])) then
          turn = false
        end
      end
    end
    if not turn then
      if not plain then
        return nil
      end
      uvt = advance(uvt, 1)
      uvt_moved = true
      local member = plain[1]
      from_ready[#from_ready + 1] = member
      plain = nil
      return { member }, false
    end
    local group = turn[1]
    local g = known[group]
    if not g then
      local f = redis.call('HMGET', base .. 'g:' .. group, 'pu', 'l', 'w', 'vt')
      g = { pause = f[1], limit = f[2] and tonumber(f[2]) or default_limit, weight = tonumber(f[3] or '1'),
            vt = tonumber(f[4] or '0'), moved = false, live = nil }
      if g.limit then
        g.live = redis.call('ZCOUNT', base .. 'gl:' .. group, '(' .. num(now), '+inf')
      end
      known[group] = g
    end
    if g.pause and tonumber(g.pause) > now then
      flush(group, g)
      group_park(base, group, 'p', g.pause)
      top = nil
      return 'again'
    end
    if g.limit and g.live >= g.limit then
      flush(group, g)
      group_park(base, group, 'l')
      top = nil
      return 'again'
    end
    -- Alone in turn: the only group at the top level, and no ungrouped item at that priority.
    -- Then every turn until its priority drops is its own (a lower level never comes first, and
    -- its vt only grows): those come off its set in one read and one ZREM, not four calls a turn.
    -- (A level found shared is not counted again until the index is read again: `top` is then a new table.)
    local run = 1
    if left > 1 and crowded ~= top and not (plain and tonumber(plain[2]) == tonumber(top[2])) then
      if redis.call('ZCARD', base .. 'gq:' .. top[1]) == 1 then
        run = left
        if g.limit then
          run = math.min(run, g.limit - g.live)
        end
      else
        crowded = top
      end
    end
    local head = redis.call('ZRANGE', base .. 'gr:' .. group, 0, run, 'WITHSCORES')
    if #head == 0 then
      flush(group, g)
      group_unindex(base, group)
      group_sync(base, group)
      top = nil
      return 'again'
    end
    local taken = {}
    for i = 1, math.min(run, #head / 2) do
      if head[2 * i] ~= head[2] then
        break
      end
      taken[i] = head[2 * i - 1]
      from_groups[#from_groups + 1] = taken[i]
      g.vt = advance(g.vt, g.weight) -- one turn at a time: the same sums as single claims
    end
    call_each('ZREM', base .. 'gr:' .. group, taken)
    g.moved = true
    if g.live then
      g.live = g.live + #taken
    end
    local after = 2 * #taken + 1 -- its next item, if read
    if head[after] and head[after + 1] == head[2] then
      -- Its next item has the same priority: it stays at this level, re-scored by its new vt.
      redis.call('ZADD', base .. 'gq:' .. top[1], num(g.vt), group)
    else
      flush(group, g)
      group_unindex(base, group)
      group_sync(base, group)
      top = nil
    end
    return taken, group
  end

  while #ids < room do
    local members, group = one(room - #ids)
    if members == nil then
      break
    end
    if members ~= 'again' then
      for _, member in ipairs(members) do
        ids[#ids + 1] = string.sub(member, 15)
        groups[#groups + 1] = group
      end
    end
  end
  call_each('ZREM', base .. 'ready', from_ready)
  call_each('ZREM', base .. 'gready', from_groups)
  for group, g in pairs(known) do
    flush(group, g)
  end
  if uvt_moved then
    redis.call('HSET', base .. 'gpool', 'uvt', num(uvt))
  end
  if pool_vt_moved then
    redis.call('HSET', base .. 'gpool', 'vt', num(pool_vt))
  end
end

local function claim(base, worker, limit, lease, now)
  settle(base, now)
  local out = {}
  local expires = num(now + lease)
  local lease_text = num(lease)
  out[1] = expires
  local ids, groups = {}, {}
  if redis.call('EXISTS', base .. 'gqp', base .. 'gpl') == 0 then
    local members = redis.call('ZRANGE', base .. 'ready', 0, limit - 1)
    call_each('ZREM', base .. 'ready', members)
    for i, member in ipairs(members) do
      ids[i] = string.sub(member, 15)
      groups[i] = false
    end
  else
    local room = limit
    local pool_limit = redis.call('GET', base .. 'gpl')
    if pool_limit then
      local live = redis.call('ZCOUNT', base .. 'leases', '(' .. num(now), '+inf')
      room = math.min(limit, tonumber(pool_limit) - live)
    end
    if room > 0 then
      turns(base, now, room, ids, groups)
    end
  end
  take(base, ids, groups, worker, expires, lease_text, out)
  if #out == 1 then
    return {}
  end
  return out
end
