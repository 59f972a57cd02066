--[[
  lock_acquire: take a fleet-wide lock if nobody holds it.

  KEYS[1] the lock (hash: holder record)
  KEYS[2] the fencing token counter
  KEYS[3] held locks (set of lock members, for listing)
  ARGV[1] owner (random, one per acquisition)
  ARGV[2] liveness in ms
  ARGV[3] lock member
  ARGV[4] name (JSON)
  ARGV[5] pid
  ARGV[6] host
  ARGV[7] worker id (JSON)
  ARGV[8] ttl ('' = none)

  Returns {1, token, acquired_at} when taken: the token comes from INCR, so
  it is above every token handed out before under this prefix. Returns
  {0, remaining liveness in ms} when held by someone else.
  The lock key expires after the liveness window unless its holder renews
  it (lock_renew-1.lua): a holder that died frees the lock by itself.
]]
--- @include "clock"
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {0, redis.call('PTTL', KEYS[1])}
end
local token = redis.call('INCR', KEYS[2])
local acquired = num(now(0))
redis.call('HSET', KEYS[1], 'o', ARGV[1], 'n', ARGV[4], 't', token, 'p', ARGV[5], 'h', ARGV[6],
  'w', ARGV[7], 'a', acquired, 'ttl', ARGV[8])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('SADD', KEYS[3], ARGV[3])
return {1, token, acquired}
