--[[
  init_version: write the hive's version record if there is none, in one step, so
  processes opening a new hive at once never see half a record.

  KEYS[1] the version record (a hash)
  ARGV[1] owner
  ARGV[2] layout version
  Returns the record as it now is, as a flat list of field, value.
]]
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], 'by', ARGV[1], 'schema', ARGV[2])
end
return redis.call('HGETALL', KEYS[1])
