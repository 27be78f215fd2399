-- jobs.lua: the tables of decide's general path (decide.lua), whose
-- limits and buckets its path for the worker's call (many.lua) lays out
-- the same way, and the reading of a decide call's layout and every job's
-- arguments.

-- Jobs, JW slots each from offset o: cost, incarnation, flags, LI
-- offset of its first limit, its number of limits, and its entry (EN
-- offset, or false). A job refused while its arguments are read has its
-- code and position in BAD, at o and o + 1. (Every slot written costs Redis
-- a few hundred instructions: the tables hold only what is read again.)
local JW = 6
-- Limits, LW slots each: rate, period, burst, q and m (burst*period/rate =
-- q + m/rate), fill time (µs); and, at the first limit of a set (the
-- limits of a job), the longest fill time of the set. A sliding window
-- (term) is N, span, N, -1, 0, span.
local LW = 7
-- Buckets, BW slots each: RK position (its name, read), empty time (a, f),
-- status (0 not read, 1 read, 2 changed, WRONGTYPE, or the E_* code of a
-- bad state), LI offset of the limit in whose rate its empty time is. (A
-- call's EP holds their epochs by offset, those not 0 only: EPOCH,
-- rules.lua.)
local BW = 5
-- Entries (one per job id), EW slots each: KEYS position of the
-- reservation (the owner's is the next), RK positions of both (false when
-- not read), status (0 not checked, 1 checked, WRONGTYPE or an E_* code),
-- slot (µs, or false; the KEYS position at fault when bad), owner
-- (incarnation, or false), the slot's regime id, and the tenant's shift
-- it recorded (SHIFT, head.lua). What changed is kept apart, in CHG.
local EW = 8

-- jobs reads the layout of a decide call and checks every job's
-- arguments: it returns M, the jobs (J), K, the limits (LI) and the jobs
-- refused (BAD, or nil); or nil and why KEYS and ARGV do not fit together.
local function jobs(keys, args)
  local nargv = #args
  local short = nargv == 5
  local J, LI, BAD = {}, {}, nil
  local M, o, nl, nkeys = 0, 0, 0, 0
  -- The current set of limits: its LI offset, its count, the ARGV position
  -- of its first rate, its first bad argument, and (when it has one limit)
  -- its rate, period and burst as text.
  local lo, L, lx, lerr, lpos = 0, 0, 0, 0, 0
  local lr, lp, lb
  -- The cost and incarnation of the job before, as text and as read: an
  -- argument equal to one already checked is not checked again (Lua
  -- interns strings, so comparing them is cheap); and the cost and limits
  -- last checked against the bursts, with the outcome.
  local lcs, lc, lis, li
  local oc, olx, oerr, opos
  local x = 3
  if short then x = 2 end
  while x <= nargv do
    M = M + 1
    if M > MAX_JOBS then return nil, 'more than ' .. MAX_JOBS .. ' jobs' end
    local at, cs, is, fs, Lk, y = x, nil, '0', '0', 1, 3
    if short then
      cs, x = args[2], 6
    else
      if x + 3 > nargv then return nil, 'the job at ARGV ' .. x .. ' has no limit count' end
      cs, is, fs = args[x], args[x + 1], args[x + 2]
      local ls = args[x + 3]
      if ls == '0' then
        Lk = 0
      elseif ls ~= '1' then
        Lk = whole(ls, 0, MAX_LIMITS)
        if Lk == nil then return nil, 'the limit count at ARGV ' .. (x + 3) .. ' is not in [0, 8]' end
      end
      if Lk == 0 and M == 1 then return nil, 'the first job has no limits' end
      y = x + 4
      x = y + 3 * Lk
      if x > nargv + 1 then return nil, 'limits past the end of ARGV' end
    end
    if Lk > 0 and (Lk > 1 or L ~= 1 or args[y] ~= lr or args[y + 1] ~= lp or args[y + 2] ~= lb) then
      lo, L, lx, lerr, lpos, olx = nl, Lk, y, 0, 0, nil
      local fill = 0
      for z = y, y + 3 * (Lk - 1), 3 do
        local r, p, b, q, m, f = term(args, z, whole)
        if r == nil then
          if lerr == 0 then lerr, lpos = p, b end
          r, p, b, q, m, f = 1, 1000, 0, 0, 0, 0
        end
        LI[nl + 1], LI[nl + 2], LI[nl + 3], LI[nl + 4], LI[nl + 5], LI[nl + 6] = r, p, b, q, m, f
        nl = nl + LW
        if f > fill then fill = f end
      end
      LI[lo + 7] = fill
      lr, lp, lb = args[y], args[y + 1], args[y + 2]
    elseif Lk > 0 then
      lx = y -- the same limit again, at positions of its own
    end
    if cs ~= lcs then lcs, lc = cs, whole(cs, 1, MAX_N) end
    if is ~= lis then lis, li = is, whole(is, 0, EXACT - 1) end
    local flags = FLAGS[fs]
    -- The job's first bad argument, in ARGV order.
    local err, pos = 0, 0
    if lc == nil then
      err, pos = E_COST, at
    elseif li == nil then
      err, pos = E_INCARNATION, at + 1
    elseif flags == nil then
      err, pos = E_FRESH, at + 2
    elseif lerr ~= 0 then
      err, pos = lerr, lpos
    else
      if lc ~= oc or lx ~= olx then
        oc, olx, oerr, opos = lc, lx, 0, 0
        for z = 0, L - 1 do
          if lc > LI[lo + LW * z + 3] then
            oerr, opos = E_OVER_BURST, lx + 3 * z + 2
            break
          end
        end
      end
      err, pos = oerr, opos
    end
    J[o + 1], J[o + 2], J[o + 3], J[o + 4], J[o + 5], J[o + 6] = lc, li, flags or 0, lo, L, false
    if err ~= 0 then
      BAD = BAD or {}
      BAD[o], BAD[o + 1] = err, pos
    end
    o = o + JW
    nkeys = nkeys + L
    if nkeys > MAX_CHARGES then return nil, 'more than ' .. MAX_CHARGES .. ' limits in all' end
  end
  if M == 0 then return nil, 'no job' end
  local K = (#keys - nkeys) / M
  if (K ~= 0 and K ~= 1 and K ~= 2 and K ~= 3) or (short and K ~= 0) then
    return nil, 'KEYS do not fit ARGV'
  end
  return M, J, K, LI, BAD
end
