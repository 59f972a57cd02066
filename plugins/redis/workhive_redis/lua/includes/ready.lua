--[[
  A pool's keys, and its ready set: PENDING items whose time has come, in claim order.

  pool_base(ready_key): the prefix every key of the pool starts with,
  '{<hive prefix>/<pool>}:' (PoolKeys.base in keys.py). Pool scripts take
  the pool's ready key as KEYS[1] and derive the prefix from it, so that
  item keys (base .. 'i:' .. id) and the pool's other keys can be named
  inside the script without passing the prefix again. Item hashes use
  two-letter field names; their legend is ITEM_FIELDS in keys.py.

  One sorted set per pool. Its score is -priority (higher priority first);
  members of one score sort by their bytes, and a member is the item's
  available_at in microseconds (14 hex digits) followed by its id, so within
  a priority the earliest available item comes first and ties go to the
  older id (ids rise with every push).

  enqueue(base, id, priority, available_at, now, group) puts a PENDING item
  where it belongs: when its time has come, the ready set (or its group's,
  includes/groups.lua; group false: ungrouped), else the delayed set
  (score = available_at), which settle() drains as time passes.
  Returns true when it became ready (worth a wake-up).

  call_each(cmd, key, members) and zadd_each(key, score, members): one
  command for many members (ZREM, SREM, SADD; ZADD with one score), in
  chunks, so that a batch claim or completion writes each index once per
  call instead of once per item (each redis.call costs the server about as
  much as the work it does), within Lua's limit on unpack's stack.
]]
--- @include "groups"
local function call_each(cmd, key, members)
  for i = 1, #members, 1000 do
    redis.call(cmd, key, unpack(members, i, math.min(i + 999, #members)))
  end
end

local function zadd_each(key, score, members)
  for i = 1, #members, 500 do
    local args = {}
    for j = i, math.min(i + 499, #members) do
      args[#args + 1] = score
      args[#args + 1] = members[j]
    end
    redis.call('ZADD', key, unpack(args))
  end
end

local function pool_base(ready_key)
  return string.sub(ready_key, 1, -#'ready' - 1) -- strip the trailing 'ready'
end

local function ready_member(available_at, id)
  return string.format('%014x', math.floor(available_at * 1000000)) .. id
end

local function enqueue(base, id, priority, available_at, now, group)
  if available_at <= now then
    if group then
      group_ready_add(base, group, priority, ready_member(available_at, id))
    else
      redis.call('ZADD', base .. 'ready', -priority, ready_member(available_at, id))
    end
    return true
  end
  redis.call('ZADD', base .. 'delayed', available_at, id)
  if group then
    group_wait(base, group, 1)
  end
  return false
end

local function dedup_release(base, item, id)
  local key = redis.call('HGET', item, 'dk')
  if key and redis.call('HGET', base .. 'dedup', key) == id then
    redis.call('HDEL', base .. 'dedup', key)
  end
end

-- Move an item to POISONED (dead-letter): kept with its error and finish time.
local function poison(base, item, id, error, now)
  redis.call('HSET', item, 'st', 'poisoned', 'er', error, 'fa', num(now))
  redis.call('HDEL', item, 'le', 'ls')
  redis.call('ZADD', base .. 'dead', now, id)
  dedup_release(base, item, id)
end
