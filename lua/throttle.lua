--[[
throttle.lua: one atomic decision for one job of one tenant, over one or more
token buckets, with a reserved slot for a job that must wait.

Model (the same as golang.org/x/time/rate): a limit adds `rate` tokens every
`period` microseconds up to `burst`; a job of cost c takes c tokens. Each
bucket is stored as its "empty time" E: the instant at which it held zero
tokens, so that tokens(t) = min(burst, (t - E) * rate / period). E is kept
exactly as a whole part and a remainder in units of 1/rate microsecond
("Ei:Ef"), so no rounding error builds up however long a tenant stays in debt.
Charging a job moves E forward by cost*period/rate; a charge that leaves E in
the future is a debt that the job waits out: its slot is at E.

KEYS (all in one {tenant} hash slot):
  KEYS[1..L]  one state key per limit, holding "Ei:Ef" (string)
  KEYS[L+1]   optional: the job's reservation key, holding its slot in µs
  KEYS[L+2]   optional, needs KEYS[L+1] and the incarnation ARGV: the job's
              owner key, holding the incarnation that was admitted

ARGV (every one a decimal integer, digits only, in the range given):
  ARGV[1]  now, µs since the Unix epoch, [1, 2^53); 0 = use Redis TIME
  ARGV[2]  cost of the job, [1, 1e9]; must not exceed any burst
  ARGV[3]  horizon: the furthest slot that may be reserved, µs, [0, 30 days]
  ARGV[4]  L, the number of limits, [1, 8]
  then for each limit i (j = 5 + 3*(i-1)):
  ARGV[j]    rate, tokens per period, [1, 1e9]
  ARGV[j+1]  period, µs, [1000, 366 days]
  ARGV[j+2]  burst, [1, 1e9], with burst*period < 2^53
  ARGV[5+3L] optional: the incarnation of the job, [0, 2^31): 0 for the
             message first published, n for the copy made by its n-th move
             off the consumer. Required when KEYS[L+2] is given.

Reply, always a flat array of integers:
  {1, 0,    remaining, reserved}  ALLOWED: run the job now. reserved=1 when
                                  the job came back for the slot it held
                                  (it was charged then, not now; the buckets
                                  are not read, and remaining is 0).
  {2, wait, remaining, reserved}  LIMITED: come back in `wait` µs (ceiling).
                                  reserved=1: a slot is held for this job and
                                  it has been charged; reserved=0: nothing was
                                  charged (no job id given, or the slot would
                                  lie past the horizon: then wait = horizon).
  {4, owner, 0, 0}                DUPLICATE: another incarnation of this job
                                  was admitted (owner names it); this one
                                  must not run. Nothing was written.
  {3, code, index}                INVALID: nothing was written. code is one of
                                  the E_* values below; index is the ARGV or
                                  KEYS position at fault (0 when none).
Redis errors (WRONGTYPE on a key of another type, OOM, ...) are raised, never
folded into a status.

Moved jobs: a job may be moved off the consumer (re-published to fire at its
slot) and the original acked. If the worker dies between the two, both the
original and the copy exist. With an owner key, the first incarnation
admitted through its reservation (or any moved copy admitted) records itself
as the owner; any other incarnation that comes later is a DUPLICATE.

TTLs: a state key lives until its bucket is full again (E + fill time); a
reservation and an owner key live for horizon + the longest fill time. Both are within
"time to refill fully + horizon", so an idle tenant costs no memory.

Clock: Redis TIME, read once after the arguments are checked. It is safe
before writes because Redis 5 and later replicate a script's effects, not
the script; Redis 7 has nothing else. Needs Redis 5 or later.

Work is bounded: at most 8 limits, one reservation and one owner key, no
loops over data.
]]

-- Globals read once: local access is cheaper in Lua than a global lookup.
local call, tonumber, find, match, format = redis.call, tonumber, string.find, string.match, string.format
local floor, ceil = math.floor, math.ceil

local ALLOWED, LIMITED, INVALID = 1, 2, 3
local E_KEYS, E_NOW, E_COST, E_HORIZON, E_COUNT = 1, 2, 3, 4, 5
local E_RATE, E_PERIOD, E_BURST, E_OVER_BURST = 6, 7, 8, 9
local E_STATE, E_STATE_TTL, E_RESV, E_RESV_TTL = 10, 11, 12, 13
local E_INCARNATION, E_OWNER, E_OWNER_TTL = 14, 15, 16
local DUPLICATE = 4

local EXACT = 9007199254740992 -- 2^53
local DAY = 86400000000
local MAX_HORIZON = 30 * DAY

-- int reads ARGV[i] as a whole number in [lo, hi], or nil.
local function int(i, lo, hi)
  local s = ARGV[i]
  if s == nil or #s == 0 or #s > 16 or not find(s, '^%d+$') then
    return nil
  end
  local n = tonumber(s)
  if n == nil or n < lo or n > hi then
    return nil
  end
  return n
end

local function invalid(code, index)
  return {INVALID, code, index}
end

local L = int(4, 1, 8)
if L == nil then
  return invalid(E_COUNT, 4)
end
local hasInc = #ARGV == 5 + 3 * L
if (#ARGV ~= 4 + 3 * L and not hasInc) or #KEYS < L or #KEYS > L + 2 or (#KEYS == L + 2 and not hasInc) then
  return invalid(E_KEYS, 0)
end
local incarnation = 0
if hasInc then
  incarnation = int(5 + 3 * L, 0, 2147483647)
  if incarnation == nil then
    return invalid(E_INCARNATION, 5 + 3 * L)
  end
end
local now = int(1, 0, EXACT - 1)
if now == nil then
  return invalid(E_NOW, 1)
end
local cost = int(2, 1, 1000000000)
if cost == nil then
  return invalid(E_COST, 2)
end
local horizon = int(3, 0, MAX_HORIZON)
if horizon == nil then
  return invalid(E_HORIZON, 3)
end
-- Check every limit's arguments before any read or write.
local rate, period, burst, fill = {}, {}, {}, {}
local maxFill = 0
for i = 1, L do
  local j = 5 + 3 * (i - 1)
  local r = int(j, 1, 1000000000)
  if r == nil then return invalid(E_RATE, j) end
  local p = int(j + 1, 1000, 366 * DAY)
  if p == nil then return invalid(E_PERIOD, j + 1) end
  local b = int(j + 2, 1, 1000000000)
  if b == nil or b * p >= EXACT then return invalid(E_BURST, j + 2) end
  if cost > b then return invalid(E_OVER_BURST, j + 2) end
  rate[i], period[i], burst[i] = r, p, b
  -- Time to fill the bucket from empty, in whole µs rounded up.
  local bp = b * p
  local f = floor(bp / r)
  if bp % r > 0 then f = f + 1 end
  fill[i] = f
  if f > maxFill then maxFill = f end
end
-- Reservations and owners live for the horizon plus the longest fill.
local jobTTL = ceil((horizon + maxFill) / 1000)

if now == 0 then
  local t = call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- Another incarnation of this job already ran: this one is a duplicate.
local owner = KEYS[L + 2]
if owner then
  local v = call('GET', owner)
  if v then
    if #v > 10 or not find(v, '^%d+$') then return invalid(E_OWNER, L + 2) end
    if call('PTTL', owner) < 0 then return invalid(E_OWNER_TTL, L + 2) end
    if tonumber(v) ~= incarnation then
      return {DUPLICATE, tonumber(v), 0, 0}
    end
  end
end

-- A job that holds a slot was charged when it got it and is never charged
-- again: admit it at or after its slot (Remaining is then reported as 0,
-- the buckets are not read), and tell it the rest of its wait when it comes
-- back early.
local resv = KEYS[L + 1]
if resv then
  local v = call('GET', resv)
  if v then
    local slot = nil
    if #v <= 16 and find(v, '^%d+$') then slot = tonumber(v) end
    if slot == nil then return invalid(E_RESV, L + 1) end
    if call('PTTL', resv) < 0 then return invalid(E_RESV_TTL, L + 1) end
    if now >= slot then
      call('DEL', resv)
      if owner then
        call('SET', owner, format('%d', incarnation), 'PX', jobTTL)
      end
      return {ALLOWED, 0, 0, 1}
    end
    return {LIMITED, slot - now, 0, 1}
  end
end

-- Read and check every bucket before any write.
local ei, ef = {}, {}
for i = 1, L do
  local v = call('GET', KEYS[i])
  if v then
    local a, f = match(v, '^(%d+):(%d+)$')
    a, f = tonumber(a), tonumber(f)
    if a == nil or f == nil or #v > 40 or f >= rate[i] or a > now + MAX_HORIZON + fill[i] then
      return invalid(E_STATE, i)
    end
    if call('PTTL', KEYS[i]) < 0 then
      return invalid(E_STATE_TTL, i)
    end
    ei[i], ef[i] = a, f
  else
    ei[i], ef[i] = 0, 0
  end
end

-- remaining returns the whole tokens left in bucket i if it were at (a, f).
local function remaining(i, a, f)
  local n = floor(((now - a) * rate[i] - f) / period[i])
  if n < 0 then return 0 end
  if n > burst[i] then return burst[i] end
  return n
end

local function minRemaining(a, f)
  local m = nil
  for i = 1, L do
    local n = remaining(i, a[i], f[i])
    if m == nil or n < m then m = n end
  end
  return m
end

-- Charge the job in every bucket (on paper) and find the longest wait.
local na, nf = {}, {}
local wait = 0
for i = 1, L do
  local r, p = rate[i], period[i]
  -- The earliest empty time a full bucket can have: now - burst*period/rate.
  local bp = burst[i] * p
  local la, lf = now - floor(bp / r), 0
  local rem = bp % r
  if rem > 0 then la, lf = la - 1, r - rem end
  local a, f = ei[i], ef[i]
  if a < la or (a == la and f < lf) then a, f = la, lf end
  -- Move the empty time forward by cost*period/rate.
  local cp = cost * p
  a = a + floor(cp / r)
  f = f + cp % r
  if f >= r then a, f = a + 1, f - r end
  na[i], nf[i] = a, f
  local w = a - now
  if f > 0 then w = w + 1 end
  if w > wait then wait = w end
end

if wait > 0 and (resv == nil or wait > horizon) then
  -- Nothing is charged. Without a job id there is no slot to hold; past the
  -- horizon the job is told to come back at the horizon.
  if resv and horizon > 0 then wait = horizon end
  return {LIMITED, wait, minRemaining(ei, ef), 0}
end

for i = 1, L do
  -- The bucket is full again at its empty time plus its fill time: exactly
  -- (na + nf/r) - now + burst*period/r µs from now, rounded up.
  local r = rate[i]
  local bp = burst[i] * period[i]
  local whole = (na[i] - now) + floor(bp / r)
  local frac = nf[i] + bp % r
  if frac >= r then whole, frac = whole + 1, frac - r end
  if frac > 0 then whole = whole + 1 end
  call('SET', KEYS[i], format('%d:%d', na[i], nf[i]), 'PX', ceil(whole / 1000))
end
if wait == 0 then
  if owner and incarnation > 0 then
    call('SET', owner, format('%d', incarnation), 'PX', jobTTL)
  end
  return {ALLOWED, 0, minRemaining(na, nf), 0}
end
call('SET', resv, format('%d', now + wait), 'PX', jobTTL)
return {LIMITED, wait, 0, 1}
