--[[
  lock_renew: a live holder keeps its lock: the liveness window starts again.

  KEYS[1] the lock
  ARGV[1] owner
  ARGV[2] liveness in ms
  Returns 1, or 0 when the lock is no longer the caller's (it lapsed).
]]
if redis.call('HGET', KEYS[1], 'o') ~= ARGV[1] then
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
