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

-- complete(base, id, token, result, now): DONE, the result kept (result '' = none).
local function complete(base, id, token, result, now)
  local item = base .. 'i:' .. id
  if not holds(item, token, now) then
    return 0
  end
  finish_claim(base, item, id)
  redis.call('HSET', item, 'st', 'done', 'fa', num(now))
  if result ~= '' then
    redis.call('HSET', item, 'rs', result)
  end
  redis.call('HDEL', item, 'le', 'ls')
  redis.call('ZADD', base .. 'done', now, id)
  dedup_release(base, item, id)
  return 1
end
