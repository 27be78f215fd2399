--[[
throttle.lua: one atomic decision for each of M jobs (usually one), over
one or more token buckets per job, with a reserved slot for a job that must
wait. The jobs of one call are decided in order, as if by M calls; jobs that
name the same bucket (the same tenant) share it.

Model (the same as golang.org/x/time/rate): a limit adds `rate` tokens every
`period` microseconds up to `burst`; a job of cost c takes c tokens. Each
bucket is stored as its "empty time" E: the instant at which it held zero
tokens, so that tokens(t) = min(burst, (t - E) * rate / period). E is kept
exactly as a whole part and a remainder in units of 1/rate microsecond
("Ei:Ef"), so no rounding error builds up however long a tenant stays in debt.
Charging a job moves E forward by cost*period/rate; a charge that leaves E in
the future is a debt that the job waits out: its slot is at E.

KEYS (a tenant's keys share its {tenant} hash tag; on Redis Cluster a call
holds one tenant's jobs only):
  KEYS[1..L]  one state key per limit, holding "Ei:Ef" (string)
  KEYS[L+1]   optional: the job's reservation key, holding its slot in µs
  KEYS[L+2]   optional, needs KEYS[L+1] and the incarnation ARGV: the job's
              owner key, holding the incarnation that was admitted
  Several jobs (M >= 2): for each job in order, its L_k state keys, then
  its reservation key and, when owners are tracked, its owner key; every
  job has the same number of job keys (0, 1 or 2).

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
  then for each further job, in order (M <= 256 in all; the first job then
  must give its incarnation too):
    its cost [1, 1e9], its incarnation [0, 2^31), its number of limits
    L_k [1, 8], and rate, period, burst of each of its limits

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

-- int reads ARGV[i] as a whole number in [lo, hi], or nil. Strings seen
-- before (the same limits repeat across the jobs of a call) are not parsed
-- again.
local parsed = {}
local function int(i, lo, hi)
  local s = ARGV[i]
  local n = parsed[s]
  if n == nil then
    if s == nil or #s == 0 or #s > 16 or not find(s, '^%d+$') then
      return nil
    end
    n = tonumber(s)
    if n == nil then return nil end
    parsed[s] = n
  end
  if n < lo or n > hi then
    return nil
  end
  return n
end

local function invalid(code, index)
  return {INVALID, code, index}
end

local now = nil
local horizon = nil

-- Shape of the call. The first job's limits come first; a call of one job
-- is 4+3L arguments long (5+3L with its incarnation).
local L1 = int(4, 1, 8)
if L1 == nil then
  return invalid(E_COUNT, 4)
end
local single = #ARGV == 4 + 3 * L1 or #ARGV == 5 + 3 * L1
local hasInc = #ARGV ~= 4 + 3 * L1

-- jobs[k] = {cost, inc, lim = first index of its limits in ARGV, L, key = its
-- first key in KEYS}. Further jobs are read with a cursor.
local jobs = {}
jobs[1] = {ci = 2, ii = 5 + 3 * L1, li = 5, L = L1}
if not single then
  if #ARGV < 5 + 3 * L1 then return invalid(E_KEYS, 0) end
  local cur = 6 + 3 * L1
  while cur <= #ARGV do
    if #jobs >= MAX_JOBS or cur + 2 > #ARGV then return invalid(E_KEYS, 0) end
    local Lk = int(cur + 2, 1, 8)
    if Lk == nil then return invalid(E_COUNT, cur + 2) end
    jobs[#jobs + 1] = {ci = cur, ii = cur + 1, li = cur + 3, L = Lk}
    cur = cur + 3 + 3 * Lk
  end
  if cur ~= #ARGV + 1 then return invalid(E_KEYS, 0) end
end
local M = #jobs
local limitKeys = 0
for k = 1, M do limitKeys = limitKeys + jobs[k].L end
local keysPerJob
if M == 1 then
  keysPerJob = #KEYS - L1
  if keysPerJob < 0 or keysPerJob > 2 or (keysPerJob == 2 and not hasInc) then
    return invalid(E_KEYS, 0)
  end
elseif #KEYS == limitKeys then
  keysPerJob = 0
elseif #KEYS == limitKeys + M then
  keysPerJob = 1
elseif #KEYS == limitKeys + 2 * M then
  keysPerJob = 2
else
  return invalid(E_KEYS, 0)
end

now = int(1, 0, EXACT - 1)
if now == nil then
  return invalid(E_NOW, 1)
end
horizon = int(3, 0, MAX_HORIZON)
if horizon == nil then
  return invalid(E_HORIZON, 3)
end

-- Every job's cost, incarnation and limits; every bucket it names.
local buckets = {}   -- state key -> bucket {r, p, b, fill, a, f, loaded, dirty}
local ordered = {}   -- buckets in order of first use, for the writes
local key = 1
for k = 1, M do
  local j = jobs[k]
  j.cost = int(j.ci, 1, 1000000000)
  if j.cost == nil then return invalid(E_COST, j.ci) end
  j.inc = 0
  if hasInc then
    j.inc = int(j.ii, 0, 2147483647)
    if j.inc == nil then return invalid(E_INCARNATION, j.ii) end
  end
  j.b = {}
  local maxFill = 0
  for i = 1, j.L do
    local x = j.li + 3 * (i - 1)
    local r = int(x, 1, 1000000000)
    if r == nil then return invalid(E_RATE, x) end
    local p = int(x + 1, 1000, 366 * DAY)
    if p == nil then return invalid(E_PERIOD, x + 1) end
    local b = int(x + 2, 1, 1000000000)
    if b == nil or b * p >= EXACT then return invalid(E_BURST, x + 2) end
    if j.cost > b then return invalid(E_OVER_BURST, x + 2) end
    -- Time to fill the bucket from empty, in whole µs rounded up.
    local bp = b * p
    local fill = floor(bp / r)
    if bp % r > 0 then fill = fill + 1 end
    if fill > maxFill then maxFill = fill end
    local name = KEYS[key]
    local bk = buckets[name]
    if bk == nil then
      bk = {name = name, index = key}
      buckets[name] = bk
      ordered[#ordered + 1] = bk
    end
    -- A key names its rate and period, so jobs naming the same key share
    -- them; they share the burst of the tenant's configuration too.
    bk.r, bk.p, bk.b, bk.fill = r, p, b, fill
    j.b[i] = bk
    key = key + 1
  end
  -- Reservations and owners live for the horizon plus the longest fill.
  j.ttl = ceil((horizon + maxFill) / 1000)
  j.rk, j.ok = key, key + 1
  if keysPerJob >= 1 then j.resv = KEYS[key]; key = key + 1 end
  if keysPerJob == 2 then j.owner = KEYS[key]; key = key + 1 end
end

if now == 0 then
  local t = call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- Read and check every job's reservation and owner before any write. A job
-- id given twice in one call shares one entry, so the later job sees what
-- the earlier one did.
local entry, entries = {}, {}
for k = 1, M do
  local j = jobs[k]
  if j.resv then
    local e = entry[j.resv]
    if e == nil then
      e = {resv = j.resv, owner = j.owner, ttl = j.ttl}
      local v = call('GET', j.resv)
      if v then
        if #v > 16 or not find(v, '^%d+$') then return invalid(E_RESV, j.rk) end
        if call('PTTL', j.resv) < 0 then return invalid(E_RESV_TTL, j.rk) end
        e.slot = tonumber(v)
      end
      if j.owner then
        v = call('GET', j.owner)
        if v then
          if #v > 10 or not find(v, '^%d+$') then return invalid(E_OWNER, j.ok) end
          if call('PTTL', j.owner) < 0 then return invalid(E_OWNER_TTL, j.ok) end
          e.own = tonumber(v)
        end
      end
      entry[j.resv] = e
      entries[#entries + 1] = e
    end
    j.e = e
  end
end

-- load reads and checks a bucket's stored state, once, before any write
-- (all writes happen at the end). It returns an error reply, or nil.
local function load(bk)
  if bk.loaded then return nil end
  bk.loaded = true
  bk.a, bk.f = 0, 0
  local v = call('GET', bk.name)
  if v then
    local a, f = match(v, '^(%d+):(%d+)$')
    a, f = tonumber(a), tonumber(f)
    if a == nil or f == nil or #v > 40 or f >= bk.r or a > now + MAX_HORIZON + bk.fill then
      return invalid(E_STATE, bk.index)
    end
    if call('PTTL', bk.name) < 0 then
      return invalid(E_STATE_TTL, bk.index)
    end
    bk.a, bk.f = a, f
  end
  return nil
end

-- charge is bucket bk's empty time after charging c tokens at now, (a, f).
local function charge(bk, c)
  local r, p = bk.r, bk.p
  -- The earliest empty time a full bucket can have: now - burst*period/rate.
  local bp = bk.b * p
  local la, lf = now - floor(bp / r), 0
  local rem = bp % r
  if rem > 0 then la, lf = la - 1, r - rem end
  local a, f = bk.a, bk.f
  if a < la or (a == la and f < lf) then a, f = la, lf end
  -- Move the empty time forward by cost*period/rate.
  local cp = c * p
  a = a + floor(cp / r)
  f = f + cp % r
  if f >= r then a, f = a + 1, f - r end
  return a, f
end

-- remaining is the whole tokens left in the tightest bucket of job j.
local function remaining(j)
  local m = nil
  for i = 1, j.L do
    local bk = j.b[i]
    local n = floor(((now - bk.a) * bk.r - bk.f) / bk.p)
    if n < 0 then n = 0 elseif n > bk.b then n = bk.b end
    if m == nil or n < m then m = n end
  end
  return m
end

-- Decide each job in order, in memory.
local reply, n = {}, 0
for k = 1, M do
  local j = jobs[k]
  local e, c = j.e, j.cost
  local st, a1, a2, a3
  if e and e.owner and e.own ~= nil and e.own ~= j.inc then
    -- Another incarnation of this job already ran: this one must not.
    st, a1, a2, a3 = DUPLICATE, e.own, 0, 0
  elseif e and e.slot then
    -- A job holding a slot was charged when it got it, never again: admit
    -- it at or after its slot (the buckets are not read, Remaining is 0);
    -- early, tell it the rest of its wait.
    if now >= e.slot then
      e.slot, e.dirty = nil, true
      if e.owner then e.own = j.inc end
      st, a1, a2, a3 = ALLOWED, 0, 0, 1
    else
      st, a1, a2, a3 = LIMITED, e.slot - now, 0, 1
    end
  else
    for i = 1, j.L do
      local bad = load(j.b[i])
      if bad then return bad end
    end
    -- Charge the job in every bucket (on paper) and find the longest wait.
    local wait = 0
    for i = 1, j.L do
      local a, f = charge(j.b[i], c)
      local w = a - now
      if f > 0 then w = w + 1 end
      if w > wait then wait = w end
    end
    if wait > 0 and (e == nil or wait > horizon) then
      -- Nothing is charged. Without a job id there is no slot to hold;
      -- past the horizon the job is told to come back at the horizon.
      if e and horizon > 0 then wait = horizon end
      st, a1, a2, a3 = LIMITED, wait, remaining(j), 0
    else
      for i = 1, j.L do
        local bk = j.b[i]
        bk.a, bk.f = charge(bk, c)
        bk.dirty = true
      end
      if wait == 0 then
        if e and e.owner and j.inc > 0 then e.own, e.dirty = j.inc, true end
        st, a1, a2, a3 = ALLOWED, 0, remaining(j), 0
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
for x = 1, #ordered do
  local bk = ordered[x]
  if bk.dirty then
    -- The bucket is full again at its empty time plus its fill time:
    -- exactly (a + f/r) - now + burst*period/r µs from now, rounded up.
    local r = bk.r
    local bp = bk.b * bk.p
    local whole = (bk.a - now) + floor(bp / r)
    local frac = bk.f + bp % r
    if frac >= r then whole, frac = whole + 1, frac - r end
    if frac > 0 then whole = whole + 1 end
    call('SET', bk.name, format('%d:%d', bk.a, bk.f), 'PX', ceil(whole / 1000))
  end
end
for x = 1, #entries do
  local e = entries[x]
  if e.dirty then
    if e.slot then
      call('SET', e.resv, format('%d', e.slot), 'PX', e.ttl)
    else
      call('DEL', e.resv)
    end
    if e.owner and e.own ~= nil then
      call('SET', e.owner, format('%d', e.own), 'PX', e.ttl)
    end
  end
end
return reply
