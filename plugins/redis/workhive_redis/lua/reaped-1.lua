--[[
  reaped: a lost worker's items are released in every pool; it leaves the
  reaping set.

  KEYS[1] reaping
  ARGV[1] worker id
  Returns 1 if it was there.
]]
return redis.call('SREM', KEYS[1], ARGV[1])
