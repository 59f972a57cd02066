--[[
  lock_list: every held lock's record; members whose lock lapsed are dropped.

  KEYS[1] held locks
  ARGV[1] prefix of lock keys
  Returns a list of records, each a flat HGETALL list.
]]
local out = {}
for _, member in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local record = redis.call('HGETALL', ARGV[1] .. member)
  if #record == 0 then
    redis.call('SREM', KEYS[1], member)
  else
    out[#out + 1] = record
  end
end
return out
