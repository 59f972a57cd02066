--[[
  claim(base, worker, limit, lease, now): take up to `limit` claimable items.

  Settles first (delayed items, expired leases), then pops the best ready
  items. Each gets state CLAIMED, its holder, attempts + 1, a fencing token
  from the pool's INCR counter (so tokens rise across every claim of the
  pool, and always above any token the item had), and a lease ending at
  now + lease on the server's clock.

  Returns a flat array: the lease expiry, then per item
  id, payload, priority, attempts, max_attempts, token, created_at,
  available_at, dedup_key, error, releases.
]]
local function claim(base, worker, limit, lease, now)
  settle(base, now)
  local out = {}
  local members = redis.call('ZRANGE', base .. 'ready', 0, limit - 1)
  if #members == 0 then
    return out
  end
  local expires = num(now + lease)
  out[1] = expires
  local lease_text = num(lease)
  local held = base .. 'held:' .. worker
  for _, member in ipairs(members) do
    local id = string.sub(member, 15)
    local item = base .. 'i:' .. id
    redis.call('ZREM', base .. 'ready', member)
    local token = redis.call('INCR', base .. 'tokens')
    local attempts = redis.call('HINCRBY', item, 'at', 1)
    redis.call('HSET', item, 'st', 'claimed', 'cb', worker, 'tk', token, 'ls', lease_text, 'le', expires)
    redis.call('ZADD', base .. 'leases', expires, id)
    redis.call('SADD', held, id)
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
  end
  return out
end
