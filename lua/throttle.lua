--[[
throttle.lua: one atomic decision for each of M jobs (usually one) of one
tenant, over one or more token buckets, with a reserved slot for a job that
must wait. The jobs of one call are decided in order, as if by M calls.

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
  One job (M = 1):
  KEYS[L+1]   optional: the job's reservation key, holding its slot in µs
  KEYS[L+2]   optional, needs KEYS[L+1] and the incarnation ARGV: the job's
              owner key, holding the incarnation that was admitted
  Several jobs (M >= 2): for each job in order, its reservation key, then,
  when owners are tracked, its owner key (L+M or L+2M keys in all).

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
  then for each further job k = 2..M, in order:
  ARGV[2+3L+2k]  its cost, [1, 1e9]
  ARGV[3+3L+2k]  its incarnation, [0, 2^31)
  so #ARGV is 4+3L (one job, no incarnation) or 3+3L+2M; M <= 256.

Reply, always a flat array of integers: for one job one of the tuples below;
for M >= 2 jobs the M tuples of 4 one after the other, or a single INVALID
tuple for the whole call.
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

Work is bounded: at most 8 limits and 256 jobs, each with one reservation
and one owner key; no loops over stored data.
]]

-- Globals read once: local access is cheaper in Lua than a global lookup.
local call, tonumber, find, match, format = redis.call, tonumber, string.find, string.match, string.format
local floor, ceil = math.floor, math.ceil

local ALLOWED, LIMITED, INVALID, DUPLICATE = 1, 2, 3, 4
local E_KEYS, E_NOW, E_COST, E_HORIZON, E_COUNT = 1, 2, 3, 4, 5
local E_RATE, E_PERIOD, E_BURST, E_OVER_BURST = 6, 7, 8, 9
local E_STATE, E_STATE_TTL, E_RESV, E_RESV_TTL = 10, 11, 12, 13
local E_INCARNATION, E_OWNER, E_OWNER_TTL = 14, 15, 16

local EXACT = 9007199254740992 -- 2^53
local DAY = 86400000000
local MAX_HORIZON = 30 * DAY
local MAX_JOBS = 256

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

-- Shape of the call: L limits, M jobs, which keys each job has.
local L = int(4, 1, 8)
if L == nil then
  return invalid(E_COUNT, 4)
end
local M, hasInc = 1, false
if #ARGV ~= 4 + 3 * L then
  local extra = #ARGV - 3 - 3 * L
  if extra < 2 or extra % 2 ~= 0 or extra / 2 > MAX_JOBS then
    return invalid(E_KEYS, 0)
  end
  M, hasInc = extra / 2, true
end
local keysPerJob
if M == 1 then
  keysPerJob = #KEYS - L
  if keysPerJob < 0 or keysPerJob > 2 or (keysPerJob == 2 and not hasInc) then
    return invalid(E_KEYS, 0)
  end
elseif #KEYS == L + M then
  keysPerJob = 1
elseif #KEYS == L + 2 * M then
  keysPerJob = 2
else
  return invalid(E_KEYS, 0)
end

local now = int(1, 0, EXACT - 1)
if now == nil then
  return invalid(E_NOW, 1)
end
local horizon = int(3, 0, MAX_HORIZON)
if horizon == nil then
  return invalid(E_HORIZON, 3)
end

-- Every job's cost and incarnation.
local cost, inc = {}, {}
local maxCost = 0
for k = 1, M do
  local ci, ii = 2, 5 + 3 * L
  if k > 1 then ci, ii = 2 + 3 * L + 2 * k, 3 + 3 * L + 2 * k end
  cost[k] = int(ci, 1, 1000000000)
  if cost[k] == nil then return invalid(E_COST, ci) end
  if cost[k] > maxCost then maxCost = cost[k] end
  inc[k] = 0
  if hasInc then
    inc[k] = int(ii, 0, 2147483647)
    if inc[k] == nil then return invalid(E_INCARNATION, ii) end
  end
end

-- Every limit's arguments.
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
  if maxCost > b then return invalid(E_OVER_BURST, j + 2) end
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

-- Read and check every job's reservation and owner before any write. A job
-- id given twice in one call shares one entry, so the later job sees what
-- the earlier one did.
local jobs, entry, entries = {}, {}, {}
local needBuckets = false
for k = 1, M do
  local rk, ok
  if keysPerJob >= 1 then rk = KEYS[L + 1 + (k - 1) * keysPerJob] end
  if keysPerJob == 2 then ok = KEYS[L + 2 + (k - 1) * keysPerJob] end
  local e = nil
  if rk then
    e = entry[rk]
    if e == nil then
      e = {resv = rk, owner = ok}
      local v = call('GET', rk)
      if v then
        if #v > 16 or not find(v, '^%d+$') then return invalid(E_RESV, L + 1 + (k - 1) * keysPerJob) end
        if call('PTTL', rk) < 0 then return invalid(E_RESV_TTL, L + 1 + (k - 1) * keysPerJob) end
        e.slot = tonumber(v)
      end
      if ok then
        v = call('GET', ok)
        if v then
          if #v > 10 or not find(v, '^%d+$') then return invalid(E_OWNER, L + 2 + (k - 1) * keysPerJob) end
          if call('PTTL', ok) < 0 then return invalid(E_OWNER_TTL, L + 2 + (k - 1) * keysPerJob) end
          e.own = tonumber(v)
        end
      end
      entry[rk] = e
      entries[#entries + 1] = e
    end
  end
  jobs[k] = e
  if e == nil or e.slot == nil then needBuckets = true end
end

-- Read and check every bucket before any write. Not needed when every job
-- only comes back for the slot it holds; read at the first job that needs
-- them (writes all happen at the end, so this is still before any write).
local ea, ef = nil, nil
local function loadBuckets()
  ea, ef = {}, {}
  for i = 1, L do
    local v = call('GET', KEYS[i])
    if v then
      local a, f = match(v, '^(%d+):(%d+)$')
      a, f = tonumber(a), tonumber(f)
      if a == nil or f == nil or #v > 40 or f >= rate[i] or a > now + MAX_HORIZON + fill[i] then
        return i, E_STATE
      end
      if call('PTTL', KEYS[i]) < 0 then
        return i, E_STATE_TTL
      end
      ea[i], ef[i] = a, f
    else
      ea[i], ef[i] = 0, 0
    end
  end
  return nil
end
if needBuckets then
  local bad, code = loadBuckets()
  if bad then return invalid(code, bad) end
end

-- minRemaining is the whole tokens left in the tightest bucket.
local function minRemaining()
  local m = nil
  for i = 1, L do
    local n = floor(((now - ea[i]) * rate[i] - ef[i]) / period[i])
    if n < 0 then n = 0 elseif n > burst[i] then n = burst[i] end
    if m == nil or n < m then m = n end
  end
  return m
end

-- Decide each job in order, in memory.
local reply, n = {}, 0
local charged = false
for k = 1, M do
  local e, c = jobs[k], cost[k]
  local st, a1, a2, a3
  if e and e.owner and e.own ~= nil and e.own ~= inc[k] then
    -- Another incarnation of this job already ran: this one must not.
    st, a1, a2, a3 = DUPLICATE, e.own, 0, 0
  elseif e and e.slot then
    -- A job holding a slot was charged when it got it, never again: admit
    -- it at or after its slot; early, tell it the rest of its wait.
    if now >= e.slot then
      e.slot, e.dirty = nil, true
      if e.owner then e.own = inc[k] end
      st, a1, a2, a3 = ALLOWED, 0, 0, 1
    else
      st, a1, a2, a3 = LIMITED, e.slot - now, 0, 1
    end
  else
    if ea == nil then
      local bad, code = loadBuckets()
      if bad then return invalid(code, bad) end
    end
    -- Charge the job in every bucket (on paper) and find the longest wait.
    -- charge(i) is bucket i's empty time after the charge, (a, f).
    local function charge(i)
      local r, p = rate[i], period[i]
      -- The earliest empty time a full bucket can have: now - burst*period/rate.
      local bp = burst[i] * p
      local la, lf = now - floor(bp / r), 0
      local rem = bp % r
      if rem > 0 then la, lf = la - 1, r - rem end
      local a, f = ea[i], ef[i]
      if a < la or (a == la and f < lf) then a, f = la, lf end
      -- Move the empty time forward by cost*period/rate.
      local cp = c * p
      a = a + floor(cp / r)
      f = f + cp % r
      if f >= r then a, f = a + 1, f - r end
      return a, f
    end
    local wait = 0
    for i = 1, L do
      local a, f = charge(i)
      local w = a - now
      if f > 0 then w = w + 1 end
      if w > wait then wait = w end
    end
    if wait > 0 and (e == nil or wait > horizon) then
      -- Nothing is charged. Without a job id there is no slot to hold;
      -- past the horizon the job is told to come back at the horizon.
      if e and horizon > 0 then wait = horizon end
      st, a1, a2, a3 = LIMITED, wait, minRemaining(), 0
    else
      for i = 1, L do
        ea[i], ef[i] = charge(i)
      end
      charged = true
      if wait == 0 then
        if e and e.owner and inc[k] > 0 then e.own, e.dirty = inc[k], true end
        st, a1, a2, a3 = ALLOWED, 0, minRemaining(), 0
      else
        e.slot, e.dirty = now + wait, true
        st, a1, a2, a3 = LIMITED, wait, 0, 1
      end
    end
  end
  reply[n + 1], reply[n + 2], reply[n + 3], reply[n + 4] = st, a1, a2, a3
  n = n + 4
end

-- Write what changed.
if charged then
  for i = 1, L do
    -- The bucket is full again at its empty time plus its fill time:
    -- exactly (ea + ef/r) - now + burst*period/r µs from now, rounded up.
    local r = rate[i]
    local bp = burst[i] * period[i]
    local whole = (ea[i] - now) + floor(bp / r)
    local frac = ef[i] + bp % r
    if frac >= r then whole, frac = whole + 1, frac - r end
    if frac > 0 then whole = whole + 1 end
    call('SET', KEYS[i], format('%d:%d', ea[i], ef[i]), 'PX', ceil(whole / 1000))
  end
end
for x = 1, #entries do
  local e = entries[x]
  if e.dirty then
    if e.slot then
      call('SET', e.resv, format('%d', e.slot), 'PX', jobTTL)
    else
      call('DEL', e.resv)
    end
    if e.owner and e.own ~= nil then
      call('SET', e.owner, format('%d', e.own), 'PX', jobTTL)
    end
  end
end
return reply
