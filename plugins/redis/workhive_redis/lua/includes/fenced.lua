--[[
  holds(item, token, now): whether `token` is the item's live claim: the
  item is CLAIMED, carries exactly that fencing token, and its lease has not
  expired on the server's clock. complete, fail, release and extend act
  only then, and change nothing otherwise.

  finish_claim(base, item, id): drop the lease and the holder's index entry,
  and free the claim's slot in its group and pool (claim_freed).
]]
local function holds(item, token, now)
  local f = redis.call('HMGET', item, 'st', 'tk', 'le')
  return f[1] == 'claimed' and f[2] == token and tonumber(f[3]) > now
end

local function finish_claim(base, item, id)
  redis.call('ZREM', base .. 'leases', id)
  local f = redis.call('HMGET', item, 'cb', 'gr')
  if f[1] then
    redis.call('SREM', base .. 'held:' .. f[1], id)
  end
  claim_freed(base, f[2], id)
end

--[[
  complete_all(base, args, from, now): finish the claims named by args[from..]
  (three per ack: item id, fencing token, result JSON, '' = none), each checked
  on its own (holds), as DONE with its result kept. Returns one integer per
  ack: 1 done, 0 refused and nothing changed for it.

  As finish_claim for each, but the indexes the items leave or join (leases,
  held:<worker>, gl:<group>, done) are written once per call, and a group
  parked at its limit (or a pool limit) wakes workers once per call: the
  server's cost is mostly its redis.call()s. Each item's own hash is written
  at once, so an ack repeated in one call is refused the second time.
]]
local function append_to(lists, key, value)
  local list = lists[key]
  if not list then
    list = {}
    lists[key] = list
  end
  list[#list + 1] = value
end

local function complete_all(base, args, from, now)
  local out, finished, of_holder, of_group = {}, {}, {}, {}
  for i = from, #args, 3 do
    local id, token, result = args[i], args[i + 1], args[i + 2]
    local item = base .. 'i:' .. id
    local f = redis.call('HMGET', item, 'st', 'tk', 'le', 'cb', 'gr', 'dk')
    if f[1] == 'claimed' and f[2] == token and tonumber(f[3]) > now then
      if result ~= '' then
        redis.call('HSET', item, 'st', 'done', 'fa', num(now), 'rs', result)
      else
        redis.call('HSET', item, 'st', 'done', 'fa', num(now))
      end
      redis.call('HDEL', item, 'le', 'ls')
      finished[#finished + 1] = id
      if f[4] then
        append_to(of_holder, f[4], id)
      end
      if f[5] then
        append_to(of_group, f[5], id)
      end
      if f[6] and redis.call('HGET', base .. 'dedup', f[6]) == id then
        redis.call('HDEL', base .. 'dedup', f[6])
      end
      out[#out + 1] = 1
    else
      out[#out + 1] = 0
    end
  end
  if #finished == 0 then
    return out
  end
  call_each('ZREM', base .. 'leases', finished)
  zadd_each(base .. 'done', now, finished)
  for holder, list in pairs(of_holder) do
    call_each('SREM', base .. 'held:' .. holder, list)
  end
  -- claim_freed, once per group: its slots are free, so a group parked at its limit takes turns again.
  local wake = redis.call('EXISTS', base .. 'gpl') == 1
  for group, list in pairs(of_group) do
    call_each('ZREM', base .. 'gl:' .. group, list)
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
  return out
end

-- complete(base, id, token, result, now): one ack (complete_all's 1 or 0).
local function complete(base, id, token, result, now)
  return complete_all(base, { id, token, result }, 1, now)[1]
end
