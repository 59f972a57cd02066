--[[
  pool_index: the number of a pool, allocated on first use and never reused.
  It is the first part of every item id of the pool, which keeps ids unique
  across pools while each pool counts its items in its own slot.

  KEYS[1] pools (hash: pool name -> number)
  KEYS[2] the pool counter
  ARGV[1] pool name

  Returns the number, or an error when 2^24 pools have been named.
]]
local known = redis.call('HGET', KEYS[1], ARGV[1])
if known then
  return tonumber(known)
end
local number = redis.call('INCR', KEYS[2])
if number > 16777215 then
  return redis.error_reply('WORKHIVE this hive has named 16777215 pools, the most its item ids can tell apart')
end
redis.call('HSET', KEYS[1], ARGV[1], number)
return number
