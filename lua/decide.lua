--[[
decide___VERSION__: one atomic decision for each of M jobs, in order, as if
by M calls: jobs that name the same bucket share it, and a later job sees
what the earlier ones did. A job that must wait gets a reserved slot (it is
charged once, and admitted without a second charge when it comes back), and
a job that may exist as several messages (OWNER, head.lua) runs only once.

KEYS, for each job in order: its L_k state keys (one per limit), then its K
job keys, the same K for every job of the call:
  K = 0  none: the job has no id; nothing is reserved
  K = 1  its reservation key
  K = 2  its reservation key and its owner key
  K = 3  its reservation key, its owner key and its tenant's shift key
         (SHIFT, head.lua)
K is (#KEYS - sum of L_k) / M. On Redis Cluster a call holds one tenant.

ARGV:
  [1]  now: µs since the Unix epoch, [0, 2^53); 0 = Redis TIME
  [2]  horizon: the furthest slot that may be reserved, µs, [0, 30 days]
  then for each job, in order (M <= MAX_JOBS):
    cost         [1, 1e9]; must not exceed any burst
    incarnation  [0, 2^53): unique to the message that carries the job
                 (read with K = 2)
    flags        0 to 3. Bit 0, fresh: the job was never decided before,
                 so it holds no reservation and its reservation key is
                 not read (read with K >= 1). Bit 1, shadow: the job is
                 admitted whatever its buckets say, and charged as a job
                 of this K would be, but within the horizon even with
                 K = 0; it never gets a slot. Its state keys must be
                 buckets of their own, apart from enforced ones.
    L_k          the number of its limits, [0, 8]; 0 = the limits of the
                 job before (not repeated: each argument costs Redis about
                 a thousand instructions), not allowed for the first job
    then, unless L_k = 0, for each limit: rate [1, 1e9] tokens per period,
    period [1000, 366 days] µs, burst [1, 1e9] with burst*period < 2^53
  Short form, for one job under one limit without a job id (KEYS[1] only,
  the form Allow sends): ARGV = now, cost, rate, period, burst.

Reply: the M tuples of 4 integers of head.lua, one after the other. A bad now or
horizon makes every job INVALID.
]]
local function decide(keys, args)
  if not call then bind() end
  local nargv, nkeys = #args, #keys
  if nargv == 5 and nkeys == 1 then
    local reply = one(keys, args, 5, 0)
    if reply then return reply end
  elseif nargv == 9 and nkeys >= 1 and nkeys <= 4 and args[6] == '1' then
    local reply = one(keys, args, 9, nkeys - 1)
    if reply then return reply end
  elseif nargv > 9 then
    local reply = many(keys, args, nargv, nkeys)
    if reply then return reply end
  end
  local M, J, K, LI, BAD = jobs(keys, args)
  if not M then return badcall(J) end
  local now = whole(args[1], 0, EXACT - 1)
  local horizon = 0
  local reply = {}
  local bad, badAt = 0, 0
  if now == nil then
    bad, badAt = E_NOW, 1
  elseif nargv ~= 5 then
    horizon = whole(args[2], 0, MAX_HORIZON)
    if horizon == nil then bad, badAt = E_HORIZON, 2 end
  end
  if bad ~= 0 then
    for n = 0, 4 * (M - 1), 4 do
      reply[n + 1], reply[n + 2], reply[n + 3], reply[n + 4] = INVALID, bad, badAt, 0
    end
    return reply
  end

  -- What to read (RK): the buckets of every valid job (once per key), and
  -- the reservation (unless every job naming it is fresh) and owner of
  -- each job id (once per id). kb maps a KEYS position to its bucket.
  local B, kb, byName, RK = {}, {}, {}, {}
  local EP = nil -- the buckets' epochs by offset, those not 0 (EPOCH, rules.lua)
  local EN, byResv = nil, nil
  local nb, ne, nr = 0, 0, 0
  local ZS, nzs = nil, 0 -- the windows (WINDOWS), one table each
  if K > 0 then EN, byResv = {}, {} end
  local key = 1 -- KEYS position of the job's first state key
  for o = 0, JW * (M - 1), JW do
    local first = key
    local last = first + J[o + 5] - 1
    key = last + 1 + K
    if not (BAD and BAD[o]) then
      local l = J[o + 4]
      for y = first, last do
        local name = keys[y]
        local bo = byName[name]
        if LI[l + 4] < 0 then
          -- A window, read apart (WINDOWS): kb holds its table.
          if bo == nil then
            bo = {name = name, y = y, p = LI[l + 2], st = 0, A = {}, n = 0}
            if LI[l + 4] == -2 then bo.W = LI[l + 5] end -- CALENDAR
            byName[name] = bo
            ZS = ZS or {}
            nzs = nzs + 1
            ZS[nzs] = bo
          end
        elseif bo == nil then
          bo = nb
          nb = nb + BW
          byName[name] = bo
          nr = nr + 1
          RK[nr] = name
          B[bo + 1], B[bo + 4] = nr, 0
        end
        kb[y] = bo
        l = l + LW
      end
      if K > 0 then
        local rk = last + 1
        local resv = keys[rk]
        local e = byResv[resv]
        if e == nil then
          e = ne
          ne = ne + EW
          byResv[resv] = e
          local ox = false
          if K >= 2 then
            nr = nr + 1
            RK[nr] = keys[rk + 1]
            ox = nr
          end
          EN[e + 1], EN[e + 2], EN[e + 3], EN[e + 4] = rk, false, ox, 0
        end
        if J[o + 3] % 2 == 0 and not EN[e + 2] then
          nr = nr + 1
          RK[nr] = resv
          EN[e + 2] = nr
        end
        J[o + 6] = e
      end
    end
  end
  local V, wrong = nil, false
  if nr > 0 then
    now = clock(now)
    V, wrong = getAll(RK, nr)
  elseif ZS then
    now = clock(now)
  end

  -- readBucket reads bucket bo (KEYS position y), as read (V), for the
  -- limit at LI offset l, once per call: its state into B, and its
  -- status. (many, in many.lua, inlines it: there it is on the path of
  -- every job of the worker's call.)
  local function readBucket(bo, y, l)
    local x, s = B[bo + 1], nil
    if wrong and wrong[x] then
      s = WRONGTYPE
    else
      local a, f, rebased, ep = 0, 0, false, 0
      if V[x] then a, f, rebased, ep = state(V[x], keys[y], LI[l + 1], LI[l + 2], LI[l + 3], LI[l + 6], now) end
      if a then
        B[bo + 2], B[bo + 3], s = a, f, 1
        if ep > 0 then EP = EP or {}; EP[bo] = ep end
        if rebased then B[bo + 5], s = l, 2 end -- see many (many.lua)
      else
        s = f
      end
    end
    B[bo + 4] = s
    return s
  end

  -- epochOf is the sum of the epochs of the buckets of a job's limits
  -- (KEYS first to last, LI from lo), read if need be (EPOCH); nil when a
  -- bucket cannot be read, or is in another rate in this call (a job
  -- before named it at another): the job's slot is then given up.
  local function epochOf(first, last, lo)
    local sum, l = 0, lo
    for y = first, last do
      if LI[l + 4] >= 0 then
        local bo = kb[y]
        local s = B[bo + 4]
        if s == 0 then s = readBucket(bo, y, l) end
        if s ~= 1 and s ~= 2 then return nil end
        local u = B[bo + 5]
        if u and u ~= l and LI[u + 1] ~= LI[l + 1] then return nil end
        sum = sum + (EP and EP[bo] or 0)
      end
      l = l + LW
    end
    return sum
  end

  -- Decide each job in order, in memory; every write is made at the end.
  -- CHG holds, per changed entry, the TTL of its keys (ms, as text) and
  -- whether its slot and its owner changed.
  local CH, CHG, SH = {}, nil, nil
  local n = 0
  local lt, lts = nil, nil -- the last TTL, as number and text
  key = 1
  for o = 0, JW * (M - 1), JW do
    local st, a1, a2, a3 = INVALID, 0, 0, 0
    local L = J[o + 5]
    local first = key
    local last = first + L - 1
    key = last + 1 + K
    local e = J[o + 6]
    local es = e and EN[e + 4]
    if es == 0 then
      -- The job id's reservation and owner, checked once.
      local rk, rx, ox = EN[e + 1], EN[e + 2], EN[e + 3]
      local slot, own, code = false, false, nil
      es = 1
      if wrong and rx and wrong[rx] then
        es, slot = WRONGTYPE, rk
      elseif wrong and ox and wrong[ox] then
        es, slot = WRONGTYPE, rk + 1
      else
        if rx and V[rx] then
          local rs
          slot, code, rs = reserved(V[rx], keys[rk])
          if slot == nil then es, slot = code, rk else EN[e + 7], EN[e + 8] = code, rs end
        end
        if es == 1 and ox and V[ox] then
          own, code = stored(V[ox], keys[rk + 1], E_OWNER, E_OWNER_TTL)
          if own == nil then es, slot, own = code, rk + 1, false end
        end
      end
      EN[e + 4], EN[e + 5], EN[e + 6] = es, slot, own
    end
    if BAD and BAD[o] then
      a1, a2 = BAD[o], BAD[o + 1]
    elseif es and es ~= 1 then
      if es == WRONGTYPE then st, a1 = WRONGTYPE, EN[e + 5] else a1, a2 = es, EN[e + 5] end
    else
      local c, inc, flags, lo = J[o + 1], J[o + 2], J[o + 3], J[o + 4]
      local fresh = flags % 2
      local slot, own = false, false
      if e then slot, own = EN[e + 5], EN[e + 6] end
      local so, oo = slot, own
      -- A slot reserved under other limits, or whose debt a rebase
      -- forgave since (EPOCH), is given up: decided again.
      if slot then
        -- (A bucket that cannot be read gives the slot up too: decided
        -- again, the job is refused naming it.)
        local ep = epochOf(first, last, lo)
        if not ep or EN[e + 7] ~= regimeE(regime(LI, lo, L), ep) then slot, so = false, -1 end
      end
      local hz = horizon
      -- The tenant's shift (SHIFT), once the job holds or gets a slot.
      local sh, shx = nil, e and EN[e + 1] + 2
      if slot and K == 3 then
        SH = SH or {}
        sh, a2 = shiftOf(SH, keys[shx])
        if sh ~= nil then a2, slot = 0, moved(slot, EN[e + 8] or 0, sh) end
      end
      if slot and K == 3 and sh == nil then
        st, a1, a2 = shiftRefused(a2, shx)
      else
        st, a1, a3, slot, own = held(own, inc, slot, K, now)
      end
      if not st then
        -- Read each bucket once, and charge the job in every one, on paper
        -- (CH), finding the longest wait and the limit (its position z)
        -- that sets it.
        local wait, wz, i, l = 0, 0, 0, lo
        local cal, S = false, nil
        for y = first, last do
          local bo = kb[y]
          local w
          if LI[l + 4] < 0 then
            local s = bo.st
            if s == 0 then
              if bo.W then s = calRead(bo, now) else s = windowRead(bo, now) end
              bo.st = s
            end
            if s ~= 1 then
              st, a1, a2, a3, slot, own = INVALID, s, y, 0, so, oo
              if s == WRONGTYPE then st, a1, a2 = WRONGTYPE, y, 0 end
              break
            end
            if bo.W then w, cal = 0, true else w = windowWait(bo, LI[l + 1], c, now) end
          else
          local s = B[bo + 4]
          if s == 0 then s = readBucket(bo, y, l) end
          if s ~= 1 and s ~= 2 then
            st, a1, a2, a3, slot, own = INVALID, s, y, 0, so, oo
            if s == WRONGTYPE then st, a1, a2 = WRONGTYPE, y, 0 end
            break
          end
          local r, u = LI[l + 1], B[bo + 5]
          if not u then
            B[bo + 5] = l -- read in this limit's rate
          elseif u ~= l and LI[u + 1] ~= r then
            -- A job before, in this call, named the bucket at another rate.
            local _, forgave
            B[bo + 2], B[bo + 3], _, forgave = rebase(B[bo + 2], B[bo + 3], LI[u + 1], r, LI[l + 2], LI[l + 3], now)
            if forgave then EP = EP or {}; EP[bo] = nextEpoch(EP[bo] or 0) end
            B[bo + 4], B[bo + 5] = 2, l
          end
          local a, f
          a, f, w = charge(B[bo + 2], B[bo + 3], r, LI[l + 2], LI[l + 4], LI[l + 5], c, now)
          CH[i + 1], CH[i + 2] = a, f
          end
          if w > wait then wait, wz = w, i / 2 end
          i = i + 2
          l = l + LW
        end
        if not st then
          local charged, cw, cz
          if cal then
            -- The calendar windows place the job (CALENDAR): a slot in a
            -- window passed may lie past the horizon; none, no charge.
            cw, cz, S = calJob(LI, lo, L, kb, first, c, now, wait)
            if S and wait <= horizon and cw > horizon then hz = cw end
            if cw > wait then wait, wz = cw, cz end
            if not S and wait <= hz then wait = hz + 1 end
          end
          st, a1, a3, slot, own, charged = verdict(wait, K, fresh, inc, own, hz, now, flags >= 2)
          if slot and K == 3 and not sh then
            SH = SH or {}
            sh, a2 = shiftOf(SH, keys[shx])
            if sh == nil then
              st, a1, a2, a3, charged = shiftRefused(a2, shx)
              slot, own = so, oo
            else
              a2 = 0
            end
          end
          local ok = st ~= INVALID and st ~= WRONGTYPE
          if cal and not S and st == LIMITED then a1 = cw end
          if ok and a1 > 0 then a3 = a3 + 2 * (wz + 1) end
          if charged then
            i, l = 0, lo
            local at = now
            if wait > 0 then at = now + wait end
            for y = first, last do
              local bo = kb[y]
              if LI[l + 4] == -2 then
                calCharge(bo, S[i / 2], c)
              elseif LI[l + 4] < 0 then
                local A = bo.A
                local na = #A
                if na > 0 and A[na - 1] == at then
                  A[na] = A[na] + c
                else
                  A[na + 1], A[na + 2] = at, c
                end
                bo.n = bo.n + c
              else
                B[bo + 2], B[bo + 3], B[bo + 4], B[bo + 5] = CH[i + 1], CH[i + 2], 2, l
              end
              i, l = i + 2, l + LW
            end
          end
          if ok and a3 % 2 == 0 then
            -- Remaining: the whole tokens left in the tightest bucket.
            l = lo
            for y = first, last do
              local bo = kb[y]
              local t
              if LI[l + 4] == -2 then
                t = calLeft(bo, LI[l + 1])
              elseif LI[l + 4] < 0 then
                t = LI[l + 1] - (bo.top - bo.live + 1) - bo.n
                if t < 0 then t = 0 end
              else
                t = tokens(B[bo + 2], B[bo + 3], LI[l + 1], LI[l + 2], LI[l + 3], now)
              end
              if y == first or t < a2 then a2 = t end
              l = l + LW
            end
          end
        end
      end
      if e and (slot ~= so or own ~= oo) then
        CHG = CHG or {}
        local ttl = ceil((hz + LI[lo + 7]) / 1000)
        if ttl ~= lt then lt, lts = ttl, format('%d', ttl) end
        CHG[e + 1] = lts
        if slot ~= so then
          EN[e + 5], CHG[e + 2] = slot, true
          if slot then EN[e + 7], EN[e + 8] = regimeE(regime(LI, lo, L), epochOf(first, last, lo)), sh end
        end
        if own ~= oo then EN[e + 6], CHG[e + 3] = own, true end
      end
    end
    reply[n + 1], reply[n + 2], reply[n + 3], reply[n + 4] = st, a1, a2, a3
    n = n + 4
  end

  -- Write what changed. Redis turns a number argument into text with
  -- printf('%.17g'): TTLs repeat (a bucket under its limit is full again
  -- within a millisecond), so the last one is kept as text.
  for bo = 0, nb - BW, BW do
    if B[bo + 4] == 2 then
      local l, a, f = B[bo + 5], B[bo + 2], B[bo + 3]
      local ttl = fullIn(a, f, LI[l + 1], LI[l + 4], LI[l + 5], now)
      if ttl > 0 then
        if ttl ~= lt then lt, lts = ttl, format('%d', ttl) end
        call('SET', RK[B[bo + 1]], stateValue(a, f, LI[l + 1], EP and EP[bo]), 'PX', lts)
      else
        call('DEL', RK[B[bo + 1]])
      end
    end
  end
  if ZS then
    for z = 1, nzs do
      local w = ZS[z]
      if w.n > 0 and w.W then
        calWrite(w, now)
      elseif w.n > 0 then
        windowWrite(w, now, horizon)
      end
    end
  end
  if CHG then
    for e = 0, ne - EW, EW do
      local ttl = CHG[e + 1]
      if ttl then
        local rk = EN[e + 1]
        if CHG[e + 2] then
          if EN[e + 5] then
            call('SET', keys[rk], resvValue(EN[e + 5], EN[e + 7], EN[e + 8]), 'PX', ttl)
            if EN[e + 8] and EN[e + 8] > 0 then call('PEXPIRE', keys[rk + 2], ttl, 'GT') end
          else
            call('DEL', keys[rk])
          end
        end
        if CHG[e + 3] then
          if EN[e + 6] then
            call('SET', keys[rk + 1], format('%d', EN[e + 6]), 'PX', ttl)
          else
            call('DEL', keys[rk + 1])
          end
        end
      end
    end
  end
  return reply
end
