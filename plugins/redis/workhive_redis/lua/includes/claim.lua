--[[
  claim(base, worker, limit, lease, now): take up to `limit` claimable items.

  Settles first (delayed items, expired leases, ended pauses), then takes
  items one turn at a time. Each gets state CLAIMED, its holder,
  attempts + 1, a fencing token from the pool's INCR counter (so tokens
  rise across every claim of the pool, and always above any token the item
  had), and a lease ending at now + lease on the server's clock.

  Fast path: with no group in the turn index and no pool limit (one EXISTS),
  every ready item is ungrouped and the best `limit` come off 'ready' at once,
  as before groups existed. Otherwise each item is one turn (next_turn), a
  batch of n acting as n successive claims, within the pool limit.

  Returns a flat array: the lease expiry, then per item
  id, payload, priority, attempts, max_attempts, token, created_at,
  available_at, dedup_key, error, releases, group.
]]

-- Claim one item already taken off its ready set; append it to `out`.
local function take(base, id, group, worker, expires, lease_text, out)
  local item = base .. 'i:' .. id
  local token = redis.call('INCR', base .. 'tokens')
  local attempts = redis.call('HINCRBY', item, 'at', 1)
  redis.call('HSET', item, 'st', 'claimed', 'cb', worker, 'tk', token, 'ls', lease_text, 'le', expires)
  redis.call('ZADD', base .. 'leases', expires, id)
  redis.call('SADD', base .. 'held:' .. worker, id)
  if group then
    redis.call('ZADD', base .. 'gl:' .. group, expires, id)
  end
  local f = redis.call('HMGET', item, 'p', 'pr', 'ma', 'ca', 'aa', 'dk', 'er', 'rl')
  local n = #out
  out[n + 1] = id
  out[n + 2] = f[1]
  out[n + 3] = f[2]
  out[n + 4] = attempts
  out[n + 5] = f[3]
  out[n + 6] = token
  out[n + 7] = f[4]
  out[n + 8] = f[5]
  out[n + 9] = f[6]
  out[n + 10] = f[7]
  out[n + 11] = f[8]
  out[n + 12] = group
end

-- Serve a turn: vt becomes max(vt, pool vt) + 1/weight; the pool's vt follows the served one.
local function advance(base, vt, weight)
  local pool_vt = tonumber(redis.call('HGET', base .. 'gpool', 'vt') or '0')
  if vt > pool_vt then
    redis.call('HSET', base .. 'gpool', 'vt', string.format('%.17g', vt))
  end
  return string.format('%.17g', math.max(vt, pool_vt) + 1 / weight)
end

--[[
  next_turn(base, now): the next item by turns, taken off its ready set, and its
  group (false: ungrouped), or nil. The best priority first (GR5): the head of
  'ready' against the top level of the index; at equal priority the smaller vt
  (the ungrouped items' vt is gpool's uvt; ties go to them, sorting first).
  A paused group or one at its limit is parked (out of the index) and the turn
  passes on; each pass parks a group, so this ends.
]]

local function next_turn(base, now)
  while true do
    local plain = redis.call('ZRANGE', base .. 'ready', 0, 0, 'WITHSCORES')
    local top = redis.call('ZRANGE', base .. 'gqp', 0, 0, 'WITHSCORES')
    local turn = false
    if #top > 0 then
      turn = redis.call('ZRANGE', base .. 'gq:' .. top[1], 0, 0, 'WITHSCORES')
      if #turn == 0 then -- never left so by group_sync; heal rather than stop claiming
        redis.call('ZREM', base .. 'gqp', top[1])
        return next_turn(base, now)
      end
    end
    if #plain > 0 and turn then
      local sp, tp = tonumber(plain[2]), tonumber(top[2])
      if sp < tp or (sp == tp and tonumber(redis.call('HGET', base .. 'gpool', 'uvt') or '0') <= tonumber(turn[2])) then
        turn = false
      end
    end
    if not turn then
      if #plain == 0 then
        return nil
      end
      local uvt = tonumber(redis.call('HGET', base .. 'gpool', 'uvt') or '0')
      redis.call('HSET', base .. 'gpool', 'uvt', advance(base, uvt, 1))
      redis.call('ZREM', base .. 'ready', plain[1])
      return plain[1], false
    end
    local group = turn[1]
    local state = base .. 'g:' .. group
    local f = redis.call('HMGET', state, 'pu', 'l', 'w', 'vt')
    local limit = group_limit(base, f[2])
    if f[1] and tonumber(f[1]) > now then
      group_park(base, group, 'p', f[1])
    elseif limit and redis.call('ZCOUNT', base .. 'gl:' .. group, '(' .. string.format('%.17g', now), '+inf') >= limit then
      group_park(base, group, 'l')
    else
      local head = redis.call('ZRANGE', base .. 'gr:' .. group, 0, 0)
      group_unindex(base, group)
      if #head > 0 then
        redis.call('ZREM', base .. 'gr:' .. group, head[1])
        redis.call('ZREM', base .. 'gready', head[1])
        redis.call('HSET', state, 'vt', advance(base, tonumber(f[4] or '0'), tonumber(f[3] or '1')))
        group_sync(base, group)
        return head[1], group
      end
      group_sync(base, group)
    end
  end
end

local function claim(base, worker, limit, lease, now)
  settle(base, now)
  local out = {}
  local expires = num(now + lease)
  local lease_text = num(lease)
  out[1] = expires
  if redis.call('EXISTS', base .. 'gqp', base .. 'gpl') == 0 then
    local members = redis.call('ZRANGE', base .. 'ready', 0, limit - 1)
    for _, member in ipairs(members) do
      redis.call('ZREM', base .. 'ready', member)
      take(base, string.sub(member, 15), false, worker, expires, lease_text, out)
    end
  else
    local room = limit
    local pool_limit = redis.call('GET', base .. 'gpl')
    if pool_limit then
      local live = redis.call('ZCOUNT', base .. 'leases', '(' .. num(now), '+inf')
      room = math.min(limit, tonumber(pool_limit) - live)
    end
    for _ = 1, room do
      local member, group = next_turn(base, now)
      if not member then
        break
      end
      take(base, string.sub(member, 15), group, worker, expires, lease_text, out)
    end
  end
  if #out == 1 then
    return {}
  end
  return out
end
