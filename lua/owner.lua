--[[
owner.lua: claim or give up the owner record of one job (see throttle.lua,
OWNER) outside a decision. The worker's fast lane claims a job this way
before it copies the job out of a backlog, and gives the claim up when the
copy cannot be made.

KEYS[1]  the job's owner key, in its tenant's {tenant} hash slot
ARGV[1]  '1' to claim, '0' to give up
ARGV[2]  the incarnation, a decimal integer in [0, 2^53)
ARGV[3]  claim only: the record's TTL in milliseconds, a decimal integer in
         [1, 31 days]

Claim: the record is written, naming the incarnation, only if there is none
(SET NX): a job another incarnation owns is never taken from it.
Give up: the record is deleted only if it names the incarnation.
Every argument is checked before anything is read or written.

Reply:
  {1, done, owner}  done is 1 when the record was written (claim) or
                    deleted (give up), else 0; owner is the incarnation the
                    record names after the call, or -1 for none
  {3, 1, 0}         INVALID: an argument is not in range, or KEYS and ARGV
                    do not match; nothing written
  {3, 2, 0}         INVALID: the stored record is not a whole number;
                    nothing written
A key of another type raises WRONGTYPE, which stays a Redis error.
]]
local function whole(s, maxdigits)
  if s == nil or #s == 0 or #s > maxdigits or not string.find(s, '^%d+$') then
    return nil
  end
  return tonumber(s)
end

local op = ARGV[1]
local inc = whole(ARGV[2], 16)
if #KEYS ~= 1 or inc == nil or inc >= 9007199254740992 then return {3, 1, 0} end
local ttl
if op == '1' then
  if #ARGV ~= 3 then return {3, 1, 0} end
  ttl = whole(ARGV[3], 11)
  if ttl == nil or ttl < 1 or ttl > 2678400000 then return {3, 1, 0} end
elseif op ~= '0' or #ARGV ~= 2 then
  return {3, 1, 0}
end

local key = KEYS[1]
local v = redis.call('GET', key)
local cur = -1
if v then
  cur = whole(v, 16)
  if cur == nil then return {3, 2, 0} end
end
if op == '1' then
  if cur ~= -1 then return {1, 0, cur} end
  redis.call('SET', key, ARGV[2], 'PX', ttl)
  return {1, 1, inc}
end
if cur ~= inc then return {1, 0, cur} end
redis.call('DEL', key)
return {1, 1, -1}
