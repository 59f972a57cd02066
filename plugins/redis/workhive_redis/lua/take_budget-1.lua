--[[
  take_budget: reserve fleet rate budget (workhive.budgets.TakesBudget, GCRA) in one step.
  Every budget key's theoretical arrival time (TAT) is a field of one hash; among
  the choices, the one that can go soonest (ties: the first) is reserved when its
  wait is at most max_wait, else nothing changes.

  KEYS[1] the TATs (hash: budget key -> seconds on the server's clock)
  ARGV[1] clock offset
  ARGV[2] max_wait ('inf' allowed)
  ARGV[3] number of choices
  then per choice: number of takes, then per take: field, interval, tolerance, cost
  Returns {index (0-based), wait} with wait as text (num).
]]
--- @include "clock"
local now = now(ARGV[1])
local max_wait = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
local at = 4
local best, best_wait, best_new = 0, math.huge, nil
for choice = 0, n - 1 do
  local takes = tonumber(ARGV[at])
  at = at + 1
  local wait, new = 0, {}
  for _ = 1, takes do
    local field, interval = ARGV[at], tonumber(ARGV[at + 1])
    local tolerance, cost = tonumber(ARGV[at + 2]), tonumber(ARGV[at + 3])
    at = at + 4
    local tat = new[field] or tonumber(redis.call('HGET', KEYS[1], field) or now)
    local base = math.max(tat, now)
    tat = math.max(base + cost * interval, now)
    new[field] = tat
    if cost > 0 then
      wait = math.max(wait, tat - tolerance - now)
    end
  end
  if wait < best_wait then
    best, best_wait, best_new = choice, wait, new
  end
end
if best_wait <= max_wait then
  for field, tat in pairs(best_new) do
    redis.call('HSET', KEYS[1], field, num(tat))
  end
end
return {best, num(best_wait)}
