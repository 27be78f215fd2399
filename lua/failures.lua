--[[
failures.lua: count one more handler failure of one job, atomically with the
key's TTL (INCR then PEXPIRE as two client commands could leave a counter
that never expires).

KEYS[1]  the job's failure counter, in its tenant's {tenant} hash slot
ARGV[1]  TTL in milliseconds, a decimal integer in [1, 30 days]

Reply:
  {1, count}   the number of failures recorded so far, this one included
  {3, 1, 1}    INVALID: ARGV[1] is not a whole number in range; nothing written
  {3, 2, 1}    INVALID: the stored counter is not a whole number; nothing written
A key of another type raises WRONGTYPE, which stays a Redis error.
]]
local ttl = ARGV[1]
if ttl == nil or #ttl == 0 or #ttl > 12 or not string.find(ttl, '^%d+$') then
  return {3, 1, 1}
end
ttl = tonumber(ttl)
if ttl < 1 or ttl > 2592000000 then
  return {3, 1, 1}
end
local v = redis.call('GET', KEYS[1])
if v and not string.find(v, '^%d+$') then
  return {3, 2, 1}
end
local n = redis.call('INCR', KEYS[1])
redis.call('PEXPIRE', KEYS[1], ttl)
return {1, n}
