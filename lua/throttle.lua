--[[
throttle.lua: one atomic decision for each of M jobs (usually one), over
one or more token buckets per job, with a reserved slot for a job that must
wait. The jobs of one call are decided in order, as if by M calls; jobs that
name the same bucket (the same tenant) share it.

Model (the same as golang.org/x/time/rate): a limit adds `rate` tokens every
`period` microseconds up to `burst`; a job of cost c takes c tokens. Each
bucket is stored as its "empty time" E: the instant at which it held zero
tokens, so that tokens(t) = min(burst, (t - E) * rate / period). E is kept
exactly as a whole part Ei (µs) and a remainder Ef in units of 1/rate
microsecond, so no rounding error builds up however long a tenant stays in
debt.
Charging a job moves E forward by cost*period/rate; a charge that leaves E in
the future is a debt that the job waits out: its slot is at E.

KEYS (a tenant's keys share its {tenant} hash tag; on Redis Cluster a call
holds one tenant's jobs only):
  KEYS[1..L]  one state key per limit, holding Ei and Ef in 12 bytes: a
              little-endian signed 64-bit and a signed 32-bit integer
              (struct.pack('<i8i4', Ei, Ef); binary, since formatting
              and parsing decimal costs each call thousands of instructions)
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
  ARGV[5+3L] optional: the incarnation of the job, [0, 2^53): a number
             unique to the message that carries it (the worker passes the
             message's stream sequence), so that the original and each
             copy made by moving it differ, and so do two copies of one
             move. Required when KEYS[L+2] is given.
  ARGV[6+3L] optional, needs ARGV[5+3L]: fresh, [0, 1]. 1 says the job has
             never been decided before (its first delivery), so it holds no
             reservation: the script does not read KEYS[L+1] (it still
             writes it if the job must wait). The owner key is read anyway.
  then for each further job, in order (M <= 256 in all; the first job then
  must give its incarnation and fresh flag too):
    its cost [1, 1e9], its incarnation [0, 2^53), its fresh flag [0, 1],
    its number of limits L_k [0, 8], and rate, period, burst of each of
    its limits; L_k = 0 says it has the limits of the job before (their
    number and their rate, period and burst, not repeated: each argument
    costs Redis about a thousand instructions to pass), with state keys
    of its own
  Short form, for one job under one limit without a job id (KEYS[1] only):
  ARGV = now, cost, rate, period, burst, each as above. Without a job id
  nothing is reserved, so there is no horizon; L is 1.

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

Moved jobs (OWNER): a job may be moved off the consumer (re-published to
fire at its slot) and the original acked. If the worker dies between the
two, both the original and the copy exist (and a move redone after a long
outage can even leave two copies). With an owner key, an incarnation that
is admitted records itself as the owner (all but a fresh original admitted
at once: never decided before, it has no copy); any other incarnation that
comes later is a DUPLICATE. An owner that comes back and is deferred
again (its handler failed, its worker stopped, or Redis answered too late
for the worker to hear it was admitted) did not run: it gives ownership up
(the owner key is deleted), since the worker may move it, and its copy
must then be free to run.

TTLs: a state key lives until its bucket is full again (E + fill time); a
reservation and an owner key live for horizon + the longest fill time. Both are within
"time to refill fully + horizon", so an idle tenant costs no memory.

Clock: Redis TIME, read once after the arguments are checked. It is safe
before writes because Redis 5 and later replicate a script's effects, not
the script; Redis 7 has nothing else. Needs Redis 5 or later.

Work is bounded: at most 8 limits and 256 jobs, each with one reservation
and one owner key; no loops over stored data.

Cost: Redis runs this body for every call, so everything it creates is paid
for on every decision. The common call (one job, one limit) takes a path
that uses locals only and creates no function; the worker's call (several
jobs, one limit each) a path that reads all its keys with one MGET and
defines no function either; the general path keeps its working state in a
few flat arrays with a fixed stride rather than a table per job or per
bucket. Checking is most of what a lone call costs besides its Redis calls,
so the common call checks all its arguments with one pattern match and
converts them by arithmetic, and every path recognises the usual values
('0', '1', a limit repeated) by comparing interned strings.
scripts/lua-instructions.sh counts the instructions redis-server executes
per call (BENCHMARKS.md has the figures).
]]

-- Globals read once: local access is cheaper in Lua than a global lookup.
local call, tonumber, find, format = redis.call, tonumber, string.find, string.format
local concat, unpack = table.concat, unpack
local floor, ceil = math.floor, math.ceil

local ALLOWED, LIMITED, INVALID, DUPLICATE = 1, 2, 3, 4
local E_KEYS, E_NOW, E_COST, E_HORIZON, E_COUNT = 1, 2, 3, 4, 5
local E_RATE, E_PERIOD, E_BURST, E_OVER_BURST = 6, 7, 8, 9
local E_STATE, E_STATE_TTL, E_RESV, E_RESV_TTL = 10, 11, 12, 13
local E_INCARNATION, E_OWNER, E_OWNER_TTL, E_FRESH = 14, 15, 16, 17

local EXACT = 9007199254740992 -- 2^53
local DAY = 86400000000
local MAX_HORIZON = 30 * DAY
local MAX_JOBS = 256

-- The shape of a lean call (one job, one limit; see below) of 5 (the short
-- form), 7, 8 or 9 arguments: digits only, L = 1.
local LEAN5 = '^%d+ %d+ %d+ %d+ %d+$'
local LEAN7 = '^%d+ %d+ %d+ 1 %d+ %d+ %d+$'
local LEAN8 = '^%d+ %d+ %d+ 1 %d+ %d+ %d+ %d+$'
local LEAN9 = '^%d+ %d+ %d+ 1 %d+ %d+ %d+ %d+ %d+$'

local A = ARGV
local nargv, nkeys = #A, #KEYS

-- The common call, one job under one limit, takes a path of its own that
-- keeps everything in locals and defines no functions (each closure a call
-- creates costs Redis CPU). It decides exactly as the general path below,
-- whose helpers hold the same arithmetic; TestBatchMatchesSequential and the
-- differential tests hold the two paths to each other and to x/time/rate.
--
-- Its checks are the general path's, made cheaply: one pattern match over
-- all arguments joined (a match per argument costs more than the decision's
-- arithmetic), conversion by arithmetic (s + 0 converts once; tonumber
-- converts twice), and the usual values ('0', '1') compared as strings,
-- which Lua interns. A call that fails any of them is not answered here: it
-- goes on to the general path, which checks each argument on its own and
-- names the one at fault.
local lean = false
local now, c, horizon, r, p, b, inc, fresh
-- shape is the pattern of the call's arguments joined, x the ARGV position
-- of its rate: 3 in the short form, 5 in the others.
local shape, x
if nargv == 5 and nkeys == 1 then
  shape, x = LEAN5, 3
elseif nargv >= 7 and nargv <= 9 and A[4] == '1' and nkeys >= 1 and nkeys <= 3
    and (nkeys < 3 or nargv >= 8) then
  shape, x = LEAN7, 5
  if nargv == 8 then shape = LEAN8 elseif nargv == 9 then shape = LEAN9 end
end
if shape and find(concat(A, ' '), shape) then
  now, c, horizon, inc, fresh = 0, 1, 0, 0, 0
  local s = A[1]
  if s ~= '0' then now = s + 0 end
  s = A[2]
  if s ~= '1' then c = s + 0 end
  if x == 5 then
    s = A[3]
    if s ~= '0' then horizon = s + 0 end
  end
  r, p, b = A[x] + 0, A[x + 1] + 0, A[x + 2] + 0
  if nargv >= 8 then
    s = A[8]
    if s ~= '0' then inc = s + 0 end
    if nargv == 9 then
      s = A[9]
      if s == '1' then fresh = 1 elseif s ~= '0' then fresh = 2 end
    end
  end
  lean = now < EXACT and c >= 1 and c <= 1000000000 and horizon <= MAX_HORIZON
    and r >= 1 and r <= 1000000000 and p >= 1000 and p <= 366 * DAY
    and b >= 1 and b <= 1000000000 and b * p < EXACT and c <= b
    and inc < EXACT and fresh <= 1
end
if lean then
  local bp = b * p
  local bpq, bpr = floor(bp / r), bp % r
  if now == 0 then
    local t = call('TIME')
    now = t[1] * 1000000 + t[2]
  end
  local fill = bpq
  if bpr > 0 then fill = fill + 1 end
  local ttl = ceil((horizon + fill) / 1000)

  -- The job's reservation and owner.
  local resv, owner = KEYS[2], KEYS[3]
  local slot, own = false, false
  if resv and fresh == 0 then
    local v = call('GET', resv)
    if v then
      if #v > 16 or not find(v, '^%d+$') then return {INVALID, E_RESV, 2} end
      if call('PTTL', resv) < 0 then return {INVALID, E_RESV_TTL, 2} end
      slot = tonumber(v)
    end
  end
  if owner then
    local v = call('GET', owner)
    if v then
      if #v > 16 or not find(v, '^%d+$') then return {INVALID, E_OWNER, 3} end
      if call('PTTL', owner) < 0 then return {INVALID, E_OWNER_TTL, 3} end
      own = tonumber(v)
      if own ~= inc then
        -- Another incarnation of this job already ran: this one must not.
        return {DUPLICATE, own, 0, 0}
      end
    end
  end
  if slot then
    -- Charged when it got its slot, never again (see the general path).
    if now < slot then
      if own then call('DEL', owner) end -- it is deferred again: see OWNER
      return {LIMITED, slot - now, 0, 1}
    end
    call('DEL', resv)
    if owner then call('SET', owner, format('%d', inc), 'PX', ttl) end
    return {ALLOWED, 0, 0, 1}
  end

  -- The bucket, as in state() and charged() below.
  local name = KEYS[1]
  local a, f = 0, 0
  local v = call('GET', name)
  if v then
    if #v ~= 12 then return {INVALID, E_STATE, 1} end
    a, f = struct.unpack('<i8i4', v)
    if a < 0 or f < 0 or f >= r or a > now + MAX_HORIZON + fill then return {INVALID, E_STATE, 1} end
    if call('PTTL', name) < 0 then return {INVALID, E_STATE_TTL, 1} end
  end
  local la, lf = now - bpq, 0
  if bpr > 0 then la, lf = la - 1, r - bpr end
  local na, nf = a, f
  if na < la or (na == la and nf < lf) then na, nf = la, lf end
  local cp = c * p
  na, nf = na + floor(cp / r), nf + cp % r
  if nf >= r then na, nf = na + 1, nf - r end
  local wait = na - now
  if nf > 0 then wait = wait + 1 end

  if wait > 0 and (not resv or wait > horizon) then
    -- Nothing is charged (see the general path); remaining as in remaining().
    if resv and horizon > 0 then wait = horizon end
    local left = floor(((now - a) * r - f) / p)
    if left < 0 then left = 0 elseif left > b then left = b end
    if own then call('DEL', owner) end
    return {LIMITED, wait, left, 0}
  end
  -- Charged: the state's TTL as in fullIn().
  local whole, frac = (na - now) + bpq, nf + bpr
  if frac >= r then whole, frac = whole + 1, frac - r end
  if frac > 0 then whole = whole + 1 end
  call('SET', name, struct.pack('<i8i4', na, nf), 'PX', ceil(whole / 1000))
  if wait > 0 then
    call('SET', resv, format('%d', now + wait), 'PX', ttl)
    if own then call('DEL', owner) end
    return {LIMITED, wait, 0, 1}
  end
  -- A fresh original has never been decided, so no copy of it exists: it
  -- needs no owner record. Any other incarnation admitted here records
  -- itself (an original redelivered after a move past the horizon, say).
  if owner and fresh == 0 then call('SET', owner, format('%d', inc), 'PX', ttl) end
  local left = floor(((now - na) * r - nf) / p)
  if left < 0 then left = 0 elseif left > b then left = b end
  return {ALLOWED, 0, left, 0}
end

-- The worker's call: M >= 2 jobs, each under one limit, and either all
-- with a reservation key (and an owner key), every job id once, or none
-- (jobs without ids, as AllowN's, batched). It decides exactly as the
-- general path, from locals and a few flat arrays, without a helper
-- function, and reads every key it may need in one MGET instead of a GET
-- each (a Redis call costs thousands of instructions whatever it does).
-- Its checks are the general path's, made cheaply: an argument equal
-- to one already checked (the same limit as the job before, a cost of '1',
-- an incarnation of '0': Lua interns strings, so comparing them is cheap)
-- is not checked again. A call that fails any check, or names a job id
-- twice, goes on to the general path, which names the argument at fault.
-- Its shape: after the first job's 9 arguments, 4 for each further job
-- with L_k = 0, 7 with L_k = 1.
local M, j = 1, 10
if nargv >= 13 and A[4] == '1' then
  while j + 3 <= nargv do
    local lk = A[j + 3]
    if lk == '0' then
      j = j + 4
    elseif lk == '1' then
      j = j + 7
    else
      break
    end
    M = M + 1
  end
end
if M >= 2 and j == nargv + 1 then
  local kpj = nkeys / M - 1
  local ok = (kpj == 0 or kpj == 1 or kpj == 2) and M <= MAX_JOBS
  local now, horizon = 0, 0
  if ok then
    local sn, sh = A[1], A[3]
    ok = find(sn, '^%d+$') and find(sh, '^%d+$')
    if ok then
      now, horizon = sn + 0, sh + 0
      ok = now < EXACT and horizon <= MAX_HORIZON
    end
  end
  -- Limits, LW slots each from offset 0, 7, ...: rate, period, burst,
  -- quotient and remainder of burst*period/rate, fill time (µs), and the
  -- TTL of a job key (ms, as text: see the writes). Jobs, JW slots each:
  -- cost, incarnation, fresh flag, offset of its limit, offset of its
  -- bucket. Buckets, BW slots each: KEYS position, empty time (a, f),
  -- state (false: not read yet, true: read, 2: changed), offset of the
  -- limit that sets its TTL.
  local LW, JW, BW = 7, 5, 5
  local LI, J, B = {}, {}, {}
  local bucketOf, seen = {}, {}
  local nl, nbk = -LW, -BW
  local KW = kpj + 1
  local lrs, lps, lbs, lcs, lis = nil, nil, nil, '1', '0'
  local lc, li = 1, 0
  local o = 0
  local cs, is, fs, rs, ps, bs = A[2], A[8], A[9], A[5], A[6], A[7]
  j = 10 -- the next job's cost
  for k = 1, M do
    if not ok then break end
    if k > 1 then
      cs, is, fs = A[j], A[j + 1], A[j + 2]
      if A[j + 3] == '1' then
        rs, ps, bs = A[j + 4], A[j + 5], A[j + 6]
        j = j + 7
      else
        j = j + 4 -- '0': the limit of the job before
      end
    end
    if rs ~= lrs or ps ~= lps or bs ~= lbs then
      if not (find(rs, '^%d+$') and find(ps, '^%d+$') and find(bs, '^%d+$')) then ok = false break end
      local r, p, b = rs + 0, ps + 0, bs + 0
      if r < 1 or r > 1000000000 or p < 1000 or p > 366 * DAY
          or b < 1 or b > 1000000000 or b * p >= EXACT then
        ok = false break
      end
      local bp = b * p
      local q, m = floor(bp / r), bp % r
      local fill = q
      if m > 0 then fill = fill + 1 end
      nl = nl + LW
      LI[nl + 1], LI[nl + 2], LI[nl + 3], LI[nl + 4] = r, p, b, q
      LI[nl + 5], LI[nl + 6], LI[nl + 7] = m, fill, format('%d', ceil((horizon + fill) / 1000))
      lrs, lps, lbs = rs, ps, bs
    end
    if cs ~= lcs then
      if not find(cs, '^%d+$') then ok = false break end
      lc, lcs = cs + 0, cs
    end
    if is ~= lis then
      if not find(is, '^%d+$') then ok = false break end
      li, lis = is + 0, is
    end
    local fresh = 0
    if fs == '1' then fresh = 1 elseif fs ~= '0' then ok = false break end
    if lc < 1 or lc > LI[nl + 3] or li >= EXACT then ok = false break end
    local kx = (k - 1) * KW + 1
    if kpj > 0 then
      local resv = KEYS[kx + 1]
      if seen[resv] then ok = false break end
      seen[resv] = true
    end
    local name = KEYS[kx]
    local bo = bucketOf[name]
    if bo == nil then
      nbk = nbk + BW
      bo = nbk
      bucketOf[name] = bo
      B[bo + 1], B[bo + 2], B[bo + 3], B[bo + 4], B[bo + 5] = kx, 0, 0, false, 0
    end
    J[o + 1], J[o + 2], J[o + 3], J[o + 4], J[o + 5] = lc, li, fresh, nl, bo
    o = o + JW
  end
  if ok then
    -- Read every bucket, and every job's owner and, unless it is fresh,
    -- its reservation, in one call.
    local RK, at = {}, 0
    for bo = 0, nbk, BW do
      at = at + 1
      RK[at] = KEYS[B[bo + 1]]
    end
    o = 0
    for k = 1, M do
      local kx = (k - 1) * KW + 1
      if kpj > 0 and J[o + 3] == 0 then
        at = at + 1
        RK[at] = KEYS[kx + 1]
      end
      if kpj == 2 then
        at = at + 1
        RK[at] = KEYS[kx + 2]
      end
      o = o + JW
    end
    local V = call('MGET', unpack(RK))
    -- MGET answers nil for a key of another type too, where GET raises
    -- WRONGTYPE: if any key it found empty exists, GET each to raise.
    local NK, nn = {}, 0
    for x = 1, at do
      if not V[x] then
        nn = nn + 1
        NK[nn] = RK[x]
      end
    end
    if nn > 0 and call('EXISTS', unpack(NK)) > 0 then
      for x = 1, nn do call('GET', NK[x]) end
    end
    if now == 0 then
      local t = call('TIME')
      now = t[1] * 1000000 + t[2]
    end
    -- Decide each job in order, in memory, checking what it reads first.
    -- Writes to job keys are listed in W (key, value or false to delete,
    -- TTL) and made at the end, with the buckets.
    local reply, W = {}, {}
    local n, nw = 0, 0
    local x = (nbk + BW) / BW -- RK position of the last key read so far
    o = 0
    for k = 1, M do
      local kx = (k - 1) * KW + 1
      local c, inc, fresh, lo, bo = J[o + 1], J[o + 2], J[o + 3], J[o + 4], J[o + 5]
      o = o + JW
      local slot, own = false, false
      if kpj > 0 and fresh == 0 then
        x = x + 1
        local v = V[x]
        if v then
          if #v > 16 or not find(v, '^%d+$') then return {INVALID, E_RESV, kx + 1} end
          if call('PTTL', RK[x]) < 0 then return {INVALID, E_RESV_TTL, kx + 1} end
          slot = tonumber(v)
        end
      end
      if kpj == 2 then
        x = x + 1
        local v = V[x]
        if v then
          if #v > 16 or not find(v, '^%d+$') then return {INVALID, E_OWNER, kx + 2} end
          if call('PTTL', RK[x]) < 0 then return {INVALID, E_OWNER_TTL, kx + 2} end
          own = tonumber(v)
        end
      end
      local st, a1, a2, a3
      -- What changes: the reservation (sc) and the owner (oc).
      local sc, oc = false, false
      if own and own ~= inc then
        -- Another incarnation of this job already ran: this one must not.
        st, a1, a2, a3 = DUPLICATE, own, 0, 0
      elseif slot then
        -- Charged when it got its slot, never again (as the general path).
        if now >= slot then
          slot, sc = false, true
          if kpj == 2 then own, oc = inc, true end
          st, a1, a2, a3 = ALLOWED, 0, 0, 1
        else
          if own then own, oc = false, true end -- deferred again: see OWNER
          st, a1, a2, a3 = LIMITED, slot - now, 0, 1
        end
      else
        local r, p, b, q, m = LI[lo + 1], LI[lo + 2], LI[lo + 3], LI[lo + 4], LI[lo + 5]
        if not B[bo + 4] then
          -- The bucket's state, checked as state() does.
          B[bo + 4] = true
          local v = V[bo / BW + 1]
          if v then
            local kb = B[bo + 1]
            if #v ~= 12 then return {INVALID, E_STATE, kb} end
            local a, f = struct.unpack('<i8i4', v)
            if a < 0 or f < 0 or f >= r or a > now + MAX_HORIZON + LI[lo + 6] then
              return {INVALID, E_STATE, kb}
            end
            if call('PTTL', KEYS[kb]) < 0 then return {INVALID, E_STATE_TTL, kb} end
            B[bo + 2], B[bo + 3] = a, f
          end
        end
        local a, f = B[bo + 2], B[bo + 3]
        local la, lf = now - q, 0
        if m > 0 then la, lf = la - 1, r - m end
        local na, nf = a, f
        if na < la or (na == la and nf < lf) then na, nf = la, lf end
        local cp = c * p
        na, nf = na + floor(cp / r), nf + cp % r
        if nf >= r then na, nf = na + 1, nf - r end
        local wait = na - now
        if nf > 0 then wait = wait + 1 end
        if wait > horizon or (kpj == 0 and wait > 0) then
          -- Nothing is charged: come back at the horizon; without a job
          -- id there is no slot to hold, come back when it is free.
          if kpj > 0 and horizon > 0 then wait = horizon end
          local left = floor(((now - a) * r - f) / p)
          if left < 0 then left = 0 elseif left > b then left = b end
          if own then own, oc = false, true end
          st, a1, a2, a3 = LIMITED, wait, left, 0
        else
          B[bo + 2], B[bo + 3], B[bo + 4], B[bo + 5] = na, nf, 2, lo
          if wait <= 0 then
            -- All but a fresh original record themselves (see OWNER).
            if kpj == 2 and fresh == 0 then own, oc = inc, true end
            local left = floor(((now - na) * r - nf) / p)
            if left < 0 then left = 0 elseif left > b then left = b end
            st, a1, a2, a3 = ALLOWED, 0, left, 0
          else
            slot, sc = now + wait, true
            if own then own, oc = false, true end
            st, a1, a2, a3 = LIMITED, wait, 0, 1
          end
        end
      end
      if sc then
        W[nw + 1], W[nw + 2], W[nw + 3] = KEYS[kx + 1], slot, LI[lo + 7]
        nw = nw + 3
      end
      if oc then
        W[nw + 1], W[nw + 2], W[nw + 3] = KEYS[kx + 2], own, LI[lo + 7]
        nw = nw + 3
      end
      reply[n + 1], reply[n + 2], reply[n + 3], reply[n + 4] = st, a1, a2, a3
      n = n + 4
    end
    -- Write what changed. Redis turns a number argument into text with
    -- printf('%.17g'), which costs more than the write itself saves: TTLs
    -- repeat (a bucket under its limit is full again within 1 ms), so the
    -- last one is kept as text.
    local lt, lts = nil, nil
    for bo = 0, nbk, BW do
      if B[bo + 4] == 2 then
        local lo = B[bo + 5]
        local a, f, r = B[bo + 2], B[bo + 3], LI[lo + 1]
        local whole, frac = (a - now) + LI[lo + 4], f + LI[lo + 5]
        if frac >= r then whole, frac = whole + 1, frac - r end
        if frac > 0 then whole = whole + 1 end
        local ttl = ceil(whole / 1000)
        if ttl ~= lt then lt, lts = ttl, format('%d', ttl) end
        call('SET', KEYS[B[bo + 1]], struct.pack('<i8i4', a, f), 'PX', lts)
      end
    end
    for w = 0, nw - 3, 3 do
      local v = W[w + 2]
      if v then
        call('SET', W[w + 1], format('%d', v), 'PX', W[w + 3])
      else
        call('DEL', W[w + 1])
      end
    end
    return reply
  end
end

-- The general path: any number of jobs and limits, and every call the lean
-- path turned away.

-- int reads ARGV[i] as a whole number in [lo, hi], or nil.
local function int(i, lo, hi)
  local s = A[i]
  if s == nil or #s == 0 or not find(s, '^%d+$') then
    return nil
  end
  local n = tonumber(s)
  if n < lo or n > hi then
    return nil
  end
  return n
end

-- A short form the lean path turned away: name the argument at fault.
if nargv == 5 then
  if nkeys ~= 1 then return {INVALID, E_KEYS, 0} end
  if int(1, 0, EXACT - 1) == nil then return {INVALID, E_NOW, 1} end
  local cs = int(2, 1, 1000000000)
  if cs == nil then return {INVALID, E_COST, 2} end
  if int(3, 1, 1000000000) == nil then return {INVALID, E_RATE, 3} end
  local ps = int(4, 1000, 366 * DAY)
  if ps == nil then return {INVALID, E_PERIOD, 4} end
  local bs = int(5, 1, 1000000000)
  if bs == nil or bs * ps >= EXACT then return {INVALID, E_BURST, 5} end
  return {INVALID, E_OVER_BURST, 5}
end

-- Shape of the call. The first job's limits come first; a call of one job
-- is 4+3L arguments long (5+3L with its incarnation, 6+3L with its fresh
-- flag too).
local L1 = int(4, 1, 8)
if L1 == nil then
  return {INVALID, E_COUNT, 4}
end
local single = nargv >= 4 + 3 * L1 and nargv <= 6 + 3 * L1
local hasInc = nargv ~= 4 + 3 * L1
local hasFresh = nargv > 5 + 3 * L1

-- In a call of several jobs the same strings (their limits) repeat: cint
-- is int with a cache, so that each is parsed once.
local cache = {}
local function cint(i, lo, hi)
  local s = A[i]
  local n = cache[s]
  if n == nil then
    n = int(i, 0, EXACT - 1)
    if n == nil then return nil end
    cache[s] = n
  end
  if n < lo or n > hi then
    return nil
  end
  return n
end

-- state reads the bucket state key name (KEYS[index]) of a limit of rate r
-- and fill time fill: its empty time (a, f), (0, 0) when absent, or nil
-- and an INVALID reply when it is malformed or has no TTL.
local function state(name, index, r, fill, now)
  local v = call('GET', name)
  if not v then return 0, 0 end
  if #v ~= 12 then return nil, {INVALID, E_STATE, index} end
  local a, f = struct.unpack('<i8i4', v)
  if a < 0 or f < 0 or f >= r or a > now + MAX_HORIZON + fill then
    return nil, {INVALID, E_STATE, index}
  end
  if call('PTTL', name) < 0 then
    return nil, {INVALID, E_STATE_TTL, index}
  end
  return a, f
end

-- charged is a bucket's empty time after charging c tokens at now, given
-- its empty time (a, f), rate r, period p and burst b.
local function charged(a, f, r, p, b, c, now)
  -- The earliest empty time a full bucket can have: now - burst*period/rate.
  local bp = b * p
  local la, lf = now - floor(bp / r), 0
  local rem = bp % r
  if rem > 0 then la, lf = la - 1, r - rem end
  if a < la or (a == la and f < lf) then a, f = la, lf end
  -- Move the empty time forward by cost*period/rate.
  local cp = c * p
  a = a + floor(cp / r)
  f = f + cp % r
  if f >= r then a, f = a + 1, f - r end
  return a, f
end


-- fullIn is the TTL of a bucket's state (ms): it is full again at its
-- empty time plus its fill time, exactly (a + f/r) - now + b*p/r µs from
-- now, rounded up.
local function fullIn(a, f, r, p, b, now)
  local bp = b * p
  local whole = (a - now) + floor(bp / r)
  local frac = f + bp % r
  if frac >= r then whole, frac = whole + 1, frac - r end
  if frac > 0 then whole = whole + 1 end
  return ceil(whole / 1000)
end

-- limit reads the limit whose rate is ARGV[x] for a job of cost c: its
-- rate, period, burst and fill time (µs, rounded up), or nil and an
-- INVALID reply.
local function limit(x, c)
  local r = cint(x, 1, 1000000000)
  if r == nil then return nil, {INVALID, E_RATE, x} end
  local p = cint(x + 1, 1000, 366 * DAY)
  if p == nil then return nil, {INVALID, E_PERIOD, x + 1} end
  local b = cint(x + 2, 1, 1000000000)
  if b == nil or b * p >= EXACT then return nil, {INVALID, E_BURST, x + 2} end
  if c > b then return nil, {INVALID, E_OVER_BURST, x + 2} end
  local bp = b * p
  local fill = floor(bp / r)
  if bp % r > 0 then fill = fill + 1 end
  return r, p, b, fill
end

-- jobKey reads a reservation or owner key (digits ≤ 16),
-- KEYS[index]: its value, false when absent, or nil and an INVALID reply.
local function jobKey(index, maxLen, eShape, eTTL)
  local name = KEYS[index]
  local v = call('GET', name)
  if not v then return false end
  if #v > maxLen or not find(v, '^%d+$') then return nil, {INVALID, eShape, index} end
  if call('PTTL', name) < 0 then return nil, {INVALID, eTTL, index} end
  return tonumber(v)
end

-- The shape of the call: M jobs, with limitKeys limits in all. The first
-- job's arguments are laid out as above; each further job's start at cur.
local M = 1
local limitKeys = L1
if not single then
  if nargv < 6 + 3 * L1 then return {INVALID, E_KEYS, 0} end
  local cur = 7 + 3 * L1
  local prevL = L1
  while cur <= nargv do
    if M >= MAX_JOBS or cur + 3 > nargv then return {INVALID, E_KEYS, 0} end
    local Lk = 1
    if A[cur + 3] ~= '1' then
      Lk = cint(cur + 3, 0, 8)
      if Lk == nil then return {INVALID, E_COUNT, cur + 3} end
    end
    M = M + 1
    if Lk == 0 then
      limitKeys = limitKeys + prevL
      cur = cur + 4
    else
      limitKeys = limitKeys + Lk
      prevL = Lk
      cur = cur + 4 + 3 * Lk
    end
  end
  if cur ~= nargv + 1 then return {INVALID, E_KEYS, 0} end
end
local keysPerJob
if M == 1 then
  keysPerJob = nkeys - L1
  if keysPerJob < 0 or keysPerJob > 2 or (keysPerJob == 2 and not hasInc) then
    return {INVALID, E_KEYS, 0}
  end
elseif nkeys == limitKeys then
  keysPerJob = 0
elseif nkeys == limitKeys + M then
  keysPerJob = 1
elseif nkeys == limitKeys + 2 * M then
  keysPerJob = 2
else
  return {INVALID, E_KEYS, 0}
end

local now = cint(1, 0, EXACT - 1)
if now == nil then
  return {INVALID, E_NOW, 1}
end
local horizon = cint(3, 0, MAX_HORIZON)
if horizon == nil then
  return {INVALID, E_HORIZON, 3}
end

-- Buckets, BW slots each from offset base: state key, its KEYS position,
-- rate, period, burst, fill time (µs), empty time (a, f), and 0 (not read
-- yet), 1 (read) or 2 (changed). A key names its rate and period, so jobs
-- naming the same key share them and its burst. byName maps a key to its
-- bucket; of[x] is the bucket of KEYS[x].
local BW = 9
local BK, byName, of = {}, {}, {}
local nb = 0
local key = 1

-- Jobs, JW slots each from offset o = (k-1)*JW: the ARGV position of its
-- first limit, its number of limits, its cost, its incarnation, the TTL of
-- its job keys (ms), its entry (offset in EN, or false), the KEYS position
-- of its first limit, and its fresh flag.
local JW = 8
local J = {}

-- The usual values ('1' for a cost, '0' for an incarnation, the same
-- limit as the job before) are recognised by comparing strings, which Lua
-- interns; anything else is read and checked by cint and limit.
local lr, lp, lb, lfill, ls1, ls2, ls3
local cur = 7 + 3 * L1
local px0, pLk = 5, L1 -- the limits of the job before
for o = 0, (M - 1) * JW, JW do
  local ci, ii, fi, x0, Lk = 2, 5 + 3 * L1, 0, 5, L1
  if o == 0 then
    if hasFresh then fi = 6 + 3 * L1 end
  else
    ci, ii, fi, x0 = cur, cur + 1, cur + 2, cur + 4
    Lk = 1
    if A[cur + 3] ~= '1' then Lk = cint(cur + 3, 0, 8) end -- checked above
    if Lk == 0 then
      x0, Lk = px0, pLk
      cur = cur + 4
    else
      cur = x0 + 3 * Lk
    end
  end
  px0, pLk = x0, Lk
  local c = 1
  if A[ci] ~= '1' then
    c = cint(ci, 1, 1000000000)
    if c == nil then return {INVALID, E_COST, ci} end
  end
  local inc = 0
  if hasInc and A[ii] ~= '0' then
    inc = cint(ii, 0, EXACT - 1)
    if inc == nil then return {INVALID, E_INCARNATION, ii} end
  end
  local fresh = 0
  if fi > 0 then
    local s = A[fi]
    if s == '1' then
      fresh = 1
    elseif s ~= '0' then
      return {INVALID, E_FRESH, fi}
    end
  end
  local firstKey = key
  local maxFill = 0
  for x = x0, x0 + 3 * (Lk - 1), 3 do
    local r, p, b, fill = lr, lp, lb, lfill
    local s1, s2, s3 = A[x], A[x + 1], A[x + 2]
    if s1 ~= ls1 or s2 ~= ls2 or s3 ~= ls3 or c > b then
      r, p, b, fill = limit(x, c)
      if r == nil then return p end
      lr, lp, lb, lfill, ls1, ls2, ls3 = r, p, b, fill, s1, s2, s3
    end
    if fill > maxFill then maxFill = fill end
    local name = KEYS[key]
    local base = byName[name]
    if base == nil then
      base = nb
      nb = nb + BW
      byName[name] = base
      BK[base + 1] = name
      BK[base + 2] = key
      BK[base + 3] = r
      BK[base + 4] = p
      BK[base + 5] = b
      BK[base + 6] = fill
      BK[base + 7] = 0
      BK[base + 8] = 0
      BK[base + 9] = 0
    else
      BK[base + 3], BK[base + 4], BK[base + 5], BK[base + 6] = r, p, b, fill
    end
    of[key] = base
    key = key + 1
  end
  -- Reservations and owners live for the horizon plus the longest fill.
  J[o + 1], J[o + 2], J[o + 3], J[o + 4] = x0, Lk, c, inc
  J[o + 5], J[o + 6], J[o + 7], J[o + 8] = ceil((horizon + maxFill) / 1000), false, firstKey, fresh
  key = key + keysPerJob
end

if now == 0 then
  local t = call('TIME')
  now = t[1] * 1000000 + t[2]
end

-- Entries, EW slots each from offset base, one per job id (a job id given
-- twice in one call shares one, so the later job sees what the earlier one
-- did): reservation key, owner key (or false), TTL (ms), slot (µs, or
-- false), owner incarnation (or false), whether the reservation changed,
-- whether it was read (a fresh job's is not), and whether the owner
-- changed (see OWNER). All are read and checked before any write.
local EW = 8
local EN, byResv = nil, nil
if keysPerJob >= 1 then
  EN, byResv = {}, {}
  local ne = 0
  for o = 0, (M - 1) * JW, JW do
    local rk = J[o + 7] + J[o + 2]
    local resv = KEYS[rk]
    local fresh = J[o + 8] == 1
    local base = byResv[resv]
    if base == nil then
      base = ne
      ne = ne + EW
      byResv[resv] = base
      local slot, owner, own, bad = false, false, false, nil
      if not fresh then
        slot, bad = jobKey(rk, 16, E_RESV, E_RESV_TTL)
        if slot == nil then return bad end
      end
      if keysPerJob == 2 then
        owner = KEYS[rk + 1]
        own, bad = jobKey(rk + 1, 16, E_OWNER, E_OWNER_TTL)
        if own == nil then return bad end
      end
      EN[base + 1] = resv
      EN[base + 2] = owner
      EN[base + 3] = J[o + 5]
      EN[base + 4] = slot
      EN[base + 5] = own
      EN[base + 6] = false
      EN[base + 7] = not fresh
      EN[base + 8] = false
    elseif not fresh and not EN[base + 7] then
      -- A fresh job named this id first; this one may hold a slot.
      local slot, bad = jobKey(rk, 16, E_RESV, E_RESV_TTL)
      if slot == nil then return bad end
      EN[base + 4], EN[base + 7] = slot, true
    end
    J[o + 6] = base
  end
end

-- remaining is the whole tokens left in the tightest bucket of the limits
-- at KEYS positions first..last: in each, those of empty time (a, f) at
-- now, floor(((now - a) * r - f) / p), within [0, burst].
local function remaining(first, last)
  local m = nil
  for x = first, last do
    local base = of[x]
    local n = floor(((now - BK[base + 7]) * BK[base + 3] - BK[base + 8]) / BK[base + 4])
    if n < 0 then n = 0 elseif n > BK[base + 5] then n = BK[base + 5] end
    if m == nil or n < m then m = n end
  end
  return m
end

-- Decide each job in order, in memory.
local reply, CH = {}, {}
local n = 0
for o = 0, (M - 1) * JW, JW do
  local c, inc, e = J[o + 3], J[o + 4], J[o + 6]
  local first = J[o + 7]
  local last = first + J[o + 2] - 1
  local st, a1, a2, a3
  if e and EN[e + 2] and EN[e + 5] and EN[e + 5] ~= inc then
    -- Another incarnation of this job already ran: this one must not.
    st, a1, a2, a3 = DUPLICATE, EN[e + 5], 0, 0
  elseif e and EN[e + 4] then
    -- A job holding a slot was charged when it got it, never again: admit
    -- it at or after its slot (the buckets are not read, Remaining is 0);
    -- early, tell it the rest of its wait.
    local slot = EN[e + 4]
    if now >= slot then
      EN[e + 4], EN[e + 6] = false, true
      if EN[e + 2] then EN[e + 5], EN[e + 8] = inc, true end
      st, a1, a2, a3 = ALLOWED, 0, 0, 1
    else
      -- Deferred again: it gives up ownership (see OWNER).
      if EN[e + 5] then EN[e + 5], EN[e + 8] = false, true end
      st, a1, a2, a3 = LIMITED, slot - now, 0, 1
    end
  else
    -- Read each bucket once, before any write (all writes are at the end).
    for x = first, last do
      local base = of[x]
      if BK[base + 9] == 0 then
        BK[base + 9] = 1
        local a, f = state(BK[base + 1], BK[base + 2], BK[base + 3], BK[base + 6], now)
        if a == nil then return f end
        BK[base + 7], BK[base + 8] = a, f
      end
    end
    -- Charge the job in every bucket (on paper, in CH) and find the
    -- longest wait.
    local wait, i = 0, 0
    for x = first, last do
      local base = of[x]
      local a, f = charged(BK[base + 7], BK[base + 8], BK[base + 3], BK[base + 4], BK[base + 5], c, now)
      CH[i + 1], CH[i + 2] = a, f
      i = i + 2
      local w = a - now
      if f > 0 then w = w + 1 end
      if w > wait then wait = w end
    end
    if wait > 0 and (not e or wait > horizon) then
      -- Nothing is charged. Without a job id there is no slot to hold;
      -- past the horizon the job is told to come back at the horizon.
      if e and horizon > 0 then wait = horizon end
      if e and EN[e + 5] then EN[e + 5], EN[e + 8] = false, true end
      st, a1, a2, a3 = LIMITED, wait, remaining(first, last), 0
    else
      i = 0
      for x = first, last do
        local base = of[x]
        BK[base + 7], BK[base + 8], BK[base + 9] = CH[i + 1], CH[i + 2], 2
        i = i + 2
      end
      if wait == 0 then
        -- As in the lean path: all but a fresh original record themselves.
        if e and EN[e + 2] and J[o + 8] == 0 then EN[e + 5], EN[e + 8] = inc, true end
        st, a1, a2, a3 = ALLOWED, 0, remaining(first, last), 0
      else
        EN[e + 4], EN[e + 6] = now + wait, true
        if EN[e + 5] then EN[e + 5], EN[e + 8] = false, true end
        st, a1, a2, a3 = LIMITED, wait, 0, 1
      end
    end
  end
  reply[n + 1] = st
  reply[n + 2] = a1
  reply[n + 3] = a2
  reply[n + 4] = a3
  n = n + 4
end

-- Write what changed.
for base = 0, nb - BW, BW do
  if BK[base + 9] == 2 then
    local a, f = BK[base + 7], BK[base + 8]
    call('SET', BK[base + 1], struct.pack('<i8i4', a, f), 'PX', fullIn(a, f, BK[base + 3], BK[base + 4], BK[base + 5], now))
  end
end
if EN then
  for base = 0, #EN - EW, EW do
    if EN[base + 6] then
      local resv, ttl = EN[base + 1], EN[base + 3]
      if EN[base + 4] then
        call('SET', resv, format('%d', EN[base + 4]), 'PX', ttl)
      else
        call('DEL', resv)
      end
    end
    if EN[base + 8] then
      if EN[base + 5] then
        call('SET', EN[base + 2], format('%d', EN[base + 5]), 'PX', EN[base + 3])
      else
        call('DEL', EN[base + 2])
      end
    end
  end
end
return reply
