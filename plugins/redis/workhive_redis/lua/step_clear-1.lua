--[[
  step_clear: forget the durable steps of finished items (requeue --fresh).

  KEYS[1] ready (names the pool)
  ARGV    item ids

  An item that is live (pending or claimed) keeps its steps: a claim may be
  using them. Returns how many steps were removed.
]]
--- @include "ready"
local base = pool_base(KEYS[1])
local removed = 0
for _, id in ipairs(ARGV) do
  local state = redis.call('HGET', base .. 'i:' .. id, 'st')
  if state and state ~= 'pending' and state ~= 'claimed' then
    local steps = base .. 'steps:' .. id
    removed = removed + redis.call('HLEN', steps)
    redis.call('DEL', steps)
  end
end
return removed
