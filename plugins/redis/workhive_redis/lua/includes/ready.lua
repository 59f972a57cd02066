--[[
  The ready set: PENDING items whose time has come, in claim order.

  One sorted set per pool. Its score is -priority (higher priority first);
  members of one score sort by their bytes, and a member is the item's
  available_at in microseconds (14 hex digits) followed by its id, so within
  a priority the earliest available item comes first and ties go to the
  older id (ids rise with every push).

  enqueue(B, id, priority, available_at, now) puts a PENDING item where it
  belongs: the ready set when its time has come, else the delayed set
  (score = available_at), which settle() drains as time passes.
  Returns true when it went to the ready set (worth a wake-up).
]]
local function ready_member(available_at, id)
  return string.format('%014x', math.floor(available_at * 1000000)) .. id
end

local function enqueue(B, id, priority, available_at, now)
  if available_at <= now then
    redis.call('ZADD', B .. 'ready', -priority, ready_member(available_at, id))
    return true
  end
  redis.call('ZADD', B .. 'delayed', available_at, id)
  return false
end

local function dedup_release(B, item, id)
  local key = redis.call('HGET', item, 'dk')
  if key and redis.call('HGET', B .. 'dedup', key) == id then
    redis.call('HDEL', B .. 'dedup', key)
  end
end

-- Move an item to POISONED (dead-letter): kept with its error and finish time.
local function poison(B, item, id, error, now)
  redis.call('HSET', item, 'st', 'poisoned', 'er', error, 'fa', num(now))
  redis.call('HDEL', item, 'le', 'ls')
  redis.call('ZADD', B .. 'dead', now, id)
  dedup_release(B, item, id)
end
