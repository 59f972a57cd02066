--[[
  register: insert or replace a worker's record: STARTING, registered and
  last heard from now; it moves to the end of the registration order.

  KEYS[1] the worker's record (hash)
  KEYS[2] workers (registration order)
  KEYS[3] the registration counter
  KEYS[4] beats (last heartbeat of live workers)
  ARGV[1] clock offset
  ARGV[2] worker id
  ARGV[3] host
  ARGV[4] pid
  ARGV[5] pools (JSON list)
  ARGV[6] capabilities (JSON list)

  Returns the registration and heartbeat time (text).
]]
--- @include "clock"
local now = num(now(ARGV[1]))
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'host', ARGV[3], 'pid', ARGV[4], 'pools', ARGV[5], 'caps', ARGV[6],
  'st', 'starting', 'ra', now, 'hb', now)
redis.call('ZADD', KEYS[2], redis.call('INCR', KEYS[3]), ARGV[2])
redis.call('ZADD', KEYS[4], now, ARGV[2])
return now
