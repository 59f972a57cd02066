--[[
  The clock and number formatting every script shares.

  now(clock): the server's TIME in seconds (a float), plus the clock offset
  the caller passes ('0' in production; tests move time forward with it).
  Every time a script stores or compares comes from here, never from a
  worker's clock. Only the test suite's exact-clock mode passes '=<time>'
  instead, a time that replaces TIME, so a model can predict every value.

  num(x): a float as text that reads back as exactly the same float
  (Redis would otherwise format Lua numbers with 14 digits).
]]
local function now(clock)
  if string.sub(clock, 1, 1) == '=' then
    return tonumber(string.sub(clock, 2))
  end
  local t = redis.call('TIME')
  return tonumber(t[1]) + tonumber(t[2]) / 1000000 + tonumber(clock)
end

local function num(x)
  return string.format('%.17g', x)
end
