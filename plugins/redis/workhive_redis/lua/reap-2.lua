--[[
  reap: declare lost every live worker silent for more than `threshold`
  seconds. This is the one decision, made atomically in the registry's slot;
  a heartbeat after it is refused (heartbeat-2.lua), so the worker's leases
  are never extended again. Its items are then released pool by pool
  (release_worker-3.lua) and it leaves the reaping set (reaped-1.lua); a
  reaper that dies in between leaves it in the set, and the next reap
  finishes the job.

  KEYS[1] beats
  KEYS[2] reaping (lost workers whose items are still being released)
  ARGV[1] clock offset
  ARGV[2] threshold seconds
  ARGV[3] prefix of worker records

  Returns a flat list: worker id, last heartbeat, 1 if declared lost now
  (0 if left over from an earlier reap).
]]
--- @include "clock"
local now = now(ARGV[1])
local threshold = tonumber(ARGV[2])
local out = {}
local fresh = {}
local silent = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', num(now - threshold), 'WITHSCORES')
for i = 1, #silent, 2 do
  local id, beat = silent[i], tonumber(silent[i + 1])
  local record = ARGV[3] .. id
  local status = redis.call('HGET', record, 'st')
  if now - beat > threshold then
    redis.call('ZREM', KEYS[1], id)
    if status and status ~= 'lost' and status ~= 'stopped' then
      redis.call('HSET', record, 'st', 'lost',
        'dt', string.format('no heartbeat for %.1fs (threshold %gs)', now - beat, threshold))
      redis.call('SADD', KEYS[2], id)
      fresh[id] = true
      out[#out + 1] = id
      out[#out + 1] = redis.call('HGET', record, 'hb')
      out[#out + 1] = 1
    end
  end
end
for _, id in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  if not fresh[id] then
    out[#out + 1] = id
    out[#out + 1] = redis.call('HGET', ARGV[3] .. id, 'hb') or '0'
    out[#out + 1] = 0
  end
end
return out
