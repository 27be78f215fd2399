--[[
failures.lua: count one more handler failure of one job, atomically with the
key's TTL (INCR then PEXPIRE as two client commands could leave a counter
that never expires), and, when asked, give up the job's owner record.

KEYS[1]  the job's failure counter, in its tenant's {tenant} hash slot
KEYS[2]  optional: the job's owner key (see throttle.lua), same hash slot
ARGV[1]  TTL in milliseconds, a decimal integer in [1, 30 days]
ARGV[2]  with KEYS[2]: the incarnation that failed, a decimal integer in
         [0, 2^53)
ARGV[3]  with KEYS[2]: the count at which the job is given up (dead-
         lettered), a decimal integer in [1, 10^6]

With KEYS[2], while the count stays below ARGV[3] the owner key is deleted
if it names the incarnation that failed: that incarnation did not run to
success, so the next one (a moved copy, say) must be free to run. At the
count ARGV[3] the record is kept: the job is given up, and no other
incarnation may run it.

Reply:
  {1, count, released}  the number of failures recorded so far, this one
                        included; released is 1 when the owner key was
                        deleted, else 0
  {3, 1, 1}    INVALID: an argument is not a whole number in range, or
               KEYS and ARGV do not match; nothing written
  {3, 2, 1}    INVALID: the stored counter is not a whole number; nothing
               written
A key of another type raises WRONGTYPE, which stays a Redis error.
]]
local function whole(s, maxdigits)
  if s == nil or #s == 0 or #s > maxdigits or not string.find(s, '^%d+$') then
    return nil
  end
  return tonumber(s)
end

local ttl = whole(ARGV[1], 12)
if ttl == nil or ttl < 1 or ttl > 2592000000 then
  return {3, 1, 1}
end
local owner, inc, giveUpAt = KEYS[2], nil, nil
if owner then
  if #ARGV ~= 3 then return {3, 1, 1} end
  inc = whole(ARGV[2], 16)
  giveUpAt = whole(ARGV[3], 7)
  if inc == nil or inc >= 9007199254740992 or giveUpAt == nil or giveUpAt < 1 or giveUpAt > 1000000 then
    return {3, 1, 1}
  end
elseif #ARGV ~= 1 then
  return {3, 1, 1}
end
-- Every read before the first write.
local v = redis.call('GET', KEYS[1])
if v and (#v > 15 or not string.find(v, '^%d+$')) then
  return {3, 2, 1}
end
local held = owner and redis.call('GET', owner)
local n = redis.call('INCR', KEYS[1])
redis.call('PEXPIRE', KEYS[1], ttl)
local released = 0
if owner and held == ARGV[2] and n < giveUpAt then
  redis.call('DEL', owner)
  released = 1
end
return {1, n, released}
