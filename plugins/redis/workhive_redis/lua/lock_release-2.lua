--[[
  lock_release: free a lock, only if the caller is its holder.

  KEYS[1] the lock
  KEYS[2] held locks
  ARGV[1] owner
  ARGV[2] lock member
  ARGV[3] the channel waiters listen on

  Returns 1 when released (waiters are told on the channel), 0 when the
  caller does not hold it (released already, expired, or never its own).
]]
if redis.call('HGET', KEYS[1], 'o') ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
redis.call('SREM', KEYS[2], ARGV[2])
redis.call('PUBLISH', ARGV[3], ARGV[2])
return 1
