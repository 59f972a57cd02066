--[[
  set_status: a worker's self-reported status and detail.

  KEYS[1] the worker's record
  KEYS[2] beats
  ARGV[1] worker id
  ARGV[2] status
  ARGV[3] '1' when a detail is given
  ARGV[4] detail

  Returns 1, or 0 for an unknown worker. STOPPED and LOST workers leave
  the beats index, so reap never looks at them.
]]
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
redis.call('HSET', KEYS[1], 'st', ARGV[2])
if ARGV[3] == '1' then
  redis.call('HSET', KEYS[1], 'dt', ARGV[4])
else
  redis.call('HDEL', KEYS[1], 'dt')
end
if ARGV[2] == 'stopped' or ARGV[2] == 'lost' then
  redis.call('ZREM', KEYS[2], ARGV[1])
else
  redis.call('ZADD', KEYS[2], 'NX', redis.call('HGET', KEYS[1], 'hb'), ARGV[1])
end
return 1
