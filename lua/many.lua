-- many.lua: decide's fast path for the worker's call, several jobs under
-- one limit each: the rules of the general path (decide.lua), with fewer
-- tables.

-- many decides the worker's call, several jobs under one limit each, each
-- job id named once, with the same rules (the same functions) as the
-- general path (decide), but with fewer tables and fewer slots in them: the
-- general path spends Redis about twice as many instructions a job on its
-- bookkeeping. Its checks are the general path's; an argument equal to one
-- already checked (the same limit, a cost of '1', an incarnation of '0':
-- Lua interns strings, so comparing them is cheap) is not checked again. A
-- call that fails any check, names a job id twice or holds a job of
-- several limits is not answered here (nil): the general path answers it.
local function many(keys, args, nargv, nkeys)
  -- The shape: after the header, 7 arguments for the first job, then 4
  -- for each job with L_k = 0 and 7 for each with L_k = 1.
  if nargv < 13 or args[6] ~= '1' then return nil end
  local M, j = 1, 10
  while j + 3 <= nargv do
    local lk = args[j + 3]
    if lk == '0' then
      j = j + 4
    elseif lk == '1' then
      j = j + 7
    else
      return nil
    end
    M = M + 1
  end
  local K = nkeys / M - 1
  if j ~= nargv + 1 or M > MAX_JOBS or (K ~= 0 and K ~= 1 and K ~= 2 and K ~= 3) then return nil end
  local now, horizon = whole(args[1], 0, EXACT - 1), whole(args[2], 0, MAX_HORIZON)
  if not (now and horizon) then return nil end

  -- Limits (LI) and buckets (B) are laid out as the general path lays
  -- them out (jobs.lua: LW and BW slots each), a limit being a set of one;
  -- EP holds the buckets' epochs. Jobs, 5 slots each: cost, incarnation,
  -- flags, LI offset of its limit, and B offset of its bucket (the general
  -- path's J holds a set of limits and an entry instead). RK names the
  -- buckets to read, JK the job keys (in job order: the reservation unless
  -- the job is fresh, and with K = 2 the owner).
  local LI, J, B, byName, RK, JK = {}, {}, {}, {}, {}, {}
  local EP = nil
  local seen = K > 0 and {}
  local nl, nb, nr, nj, o = -LW, 0, 0, 0, 0
  local lrs, lps, lbs, lcs, lis = nil, nil, nil, '1', '0'
  local lc, li = 1, 0
  local rs, ps, bs = args[7], args[8], args[9]
  local cs, is, fs = args[3], args[4], args[5]
  local kx = 1
  j = 10
  for k = 1, M do
    if k > 1 then
      cs, is, fs = args[j], args[j + 1], args[j + 2]
      if args[j + 3] == '1' then
        rs, ps, bs = args[j + 4], args[j + 5], args[j + 6]
        j = j + 7
      else
        j = j + 4
      end
    end
    if rs ~= lrs or ps ~= lps or bs ~= lbs then
      local r, p, b, q, m, fill = limit(args, j - 3, whole) -- j is past them
      if not r then return nil end
      nl = nl + LW
      LI[nl + 1], LI[nl + 2], LI[nl + 3], LI[nl + 4], LI[nl + 5], LI[nl + 6] = r, p, b, q, m, fill
      LI[nl + 7] = fill
      lrs, lps, lbs = rs, ps, bs
    end
    if cs ~= lcs then lcs, lc = cs, whole(cs, 1, MAX_N) end
    if is ~= lis then lis, li = is, whole(is, 0, EXACT - 1) end
    local flags = FLAGS[fs]
    if not (lc and li and flags) or lc > LI[nl + 3] then return nil end
    local name = keys[kx]
    local bo = byName[name]
    if bo == nil then
      bo = nb
      nb = nb + BW
      byName[name] = bo
      nr = nr + 1
      RK[nr] = name
      B[bo + 1], B[bo + 4] = nr, 0
    end
    if K > 0 then
      local resv = keys[kx + 1]
      if seen[resv] then return nil end
      seen[resv] = true
      if flags % 2 == 0 then
        nj = nj + 1
        JK[nj] = resv
      end
      if K >= 2 then
        nj = nj + 1
        JK[nj] = keys[kx + 2]
      end
    end
    J[o + 1], J[o + 2], J[o + 3], J[o + 4], J[o + 5] = lc, li, flags, nl, bo
    o = o + 5
    kx = kx + 1 + K
  end
  now = clock(now)
  local V, wrong = getAll(RK, nr)
  local JV, jwrong = nil, false
  if nj > 0 then JV, jwrong = getAll(JK, nj) end
  -- readBucket reads bucket bo, as read (V), for the limit at LI offset
  -- lo, once per call: its state into B, and its status. A job back to
  -- its slot calls it; a charge reads the bucket inline.
  local function readBucket(bo, lo)
    local x, s = B[bo + 1], nil
    if wrong and wrong[x] then
      s = WRONGTYPE
    else
      local a, f, rebased, e = 0, 0, false, 0
      if V[x] then a, f, rebased, e = state(V[x], RK[x], LI[lo + 1], LI[lo + 2], LI[lo + 3], LI[lo + 6], now) end
      if a then
        B[bo + 2], B[bo + 3], s = a, f, 1
        if e > 0 then EP = EP or {}; EP[bo] = e end
        -- Which limit's rate the state is in is written only when it
        -- must be (a slot written costs Redis hundreds of
        -- instructions): at a charge, or here when it was rebased.
        if rebased then B[bo + 5], s = lo, 2 end
      else
        s = f
      end
    end
    B[bo + 4] = s
    return s
  end

  -- Decide each job in order, in memory. Writes to job keys are listed in
  -- W (KEYS position, value or false to delete, TTL) and made at the end,
  -- with the buckets; SH holds the shifts read (SHIFT), by key, and PX
  -- the shift keys to keep as long as a reservation recording them.
  local reply, W, SH, PX = {}, {}, nil, nil
  -- The last shift key read and its shift: a call's jobs are mostly of
  -- one tenant, and a call of shiftOf costs Redis hundreds of instructions.
  local shk, shv = nil, nil
  -- The regime id of the last slot written, with its limit and bucket:
  -- reset whenever the bucket's epoch may change (a rebase in this call).
  local rid, rlo, rbo = nil, nil, nil
  -- The TTL of job keys written (ms, as text), with its limit: the
  -- horizon and the limit's fill time.
  local tlo, tts = nil, nil
  local n, nw, jx = 0, 0, 0
  o, kx = 0, 1
  for k = 1, M do
    local c, inc, flags, lo, bo = J[o + 1], J[o + 2], J[o + 3], J[o + 4], J[o + 5]
    local fresh = flags % 2
    o = o + 5
    local st, a1, a2, a3 = nil, 0, 0, 0
    local slot, own, code, sid, rs, sh = false, false, nil, nil, 0, nil
    if K > 0 and fresh == 0 then
      jx = jx + 1
      if jwrong and jwrong[jx] then
        st, a1 = WRONGTYPE, kx + 1
      elseif JV[jx] then
        slot, sid, rs = reserved(JV[jx], keys[kx + 1])
        if slot == nil then st, a1, a2, slot = INVALID, sid, kx + 1, false end
      end
    end
    if K >= 2 then
      jx = jx + 1
      if st then
        -- refused already
      elseif jwrong and jwrong[jx] then
        st, a1 = WRONGTYPE, kx + 2
      elseif JV[jx] then
        own, code = stored(JV[jx], keys[kx + 2], E_OWNER, E_OWNER_TTL)
        if own == nil then st, a1, a2, own = INVALID, code, kx + 2, false end
      end
    end
    local so, oo = slot, own
    if slot and not st then
      -- A slot reserved under another limit, or whose debt a rebase
      -- forgave since (EPOCH), is given up: decided again. So is one on
      -- a bucket a job before, in this call, named at another rate.
      local s = B[bo + 4]
      if s == 0 then s = readBucket(bo, lo) end
      if s == WRONGTYPE then
        st, a1 = WRONGTYPE, kx
      elseif s ~= 1 and s ~= 2 then
        st, a1, a2 = INVALID, s, kx
      else
        local u = B[bo + 5]
        local id = regime1(LI[lo + 1], LI[lo + 2])
        local ep = EP and EP[bo]
        if ep then id = (id * 31 + ep) % RID end
        if sid ~= id or (u and u ~= lo and LI[u + 1] ~= LI[lo + 1]) then slot, so = false, -1 end
      end
    end
    if not st and slot and K == 3 then
      if keys[kx + 3] == shk then
        sh = shv
      else
        SH = SH or {}
        sh, code = shiftOf(SH, keys[kx + 3])
        if sh then shk, shv = keys[kx + 3], sh end
      end
      if sh == nil then st, a1, a2 = shiftRefused(code, kx + 3) else slot = moved(slot, rs, sh) end
    end
    if not st and (slot or own) then st, a1, a3, slot, own = held(own, inc, slot, K, now) end
    if not st then
      local s = B[bo + 4]
      if s == 0 then
        -- readBucket, inlined: a call costs Redis hundreds of
        -- instructions, and this one is made for every bucket.
        local x = B[bo + 1]
        if wrong and wrong[x] then
          s = WRONGTYPE
        else
          local a, f, rebased, ep = 0, 0, false, 0
          if V[x] then a, f, rebased, ep = state(V[x], RK[x], LI[lo + 1], LI[lo + 2], LI[lo + 3], LI[lo + 6], now) end
          if a then
            B[bo + 2], B[bo + 3], s = a, f, 1
            if ep > 0 then EP = EP or {}; EP[bo] = ep end
            if rebased then B[bo + 5], s = lo, 2 end
          else
            s = f
          end
        end
        B[bo + 4] = s
      end
      if s == WRONGTYPE then
        st, a1 = WRONGTYPE, kx
      elseif s ~= 1 and s ~= 2 then
        st, a1, a2 = INVALID, s, kx
      else
        local r, u = LI[lo + 1], B[bo + 5]
        if u and u ~= lo and LI[u + 1] ~= r then
          -- A job before, in this call, named the bucket at another rate.
          local _, forgave
          B[bo + 2], B[bo + 3], _, forgave = rebase(B[bo + 2], B[bo + 3], LI[u + 1], r, LI[lo + 2], LI[lo + 3], now)
          if forgave then EP = EP or {}; EP[bo] = nextEpoch(EP[bo] or 0); rlo = nil end
          B[bo + 4], B[bo + 5] = 2, lo
        end
        local a, f, wait = charge(B[bo + 2], B[bo + 3], r, LI[lo + 2], LI[lo + 4], LI[lo + 5], c, now)
        local charged
        st, a1, a3, slot, own, charged = verdict(wait, K, fresh, inc, own, horizon, now, flags >= 2)
        if slot and K == 3 and not sh then
          if keys[kx + 3] == shk then
            sh = shv
          else
            SH = SH or {}
            sh, code = shiftOf(SH, keys[kx + 3])
            if sh then shk, shv = keys[kx + 3], sh end
          end
          -- Refused: nothing charged; a3 set so that no remaining is
          -- counted, and put back to 0 below.
          if sh == nil then st, a1, a2, a3, charged = shiftRefused(code, kx + 3) a3 = 1 end
        end
        if charged then
          B[bo + 2], B[bo + 3], B[bo + 4], B[bo + 5] = a, f, 2, lo
        elseif not u then
          B[bo + 5] = lo -- read in this limit's rate, and kept in it
        end
        if a3 == 0 then a2 = tokens(B[bo + 2], B[bo + 3], r, LI[lo + 2], LI[lo + 3], now) end
        if a1 > 0 then a3 = a3 + 2 end -- its one limit set the wait
      end
    end
    if st == WRONGTYPE or st == INVALID then
      slot, own, a3 = so, oo, 0
    end
    if (slot ~= so or own ~= oo) and lo ~= tlo then
      tlo, tts = lo, format('%d', ceil((horizon + LI[lo + 7]) / 1000))
    end
    if slot ~= so then
      -- resvValue, inlined: a call costs Redis hundreds of instructions.
      local v = slot
      if v then
        -- regimeE(regime1(...)), inlined and kept for the next job of
        -- the same limit and bucket (a flood's jobs are all one).
        local id = rid
        if lo ~= rlo or bo ~= rbo then
          id = (LI[lo + 1] * 1000003 + LI[lo + 2]) % RID
          local ep = EP and EP[bo]
          if ep then id = (id * 31 + ep) % RID end
          rid, rlo, rbo = id, lo, bo
        end
        if sh and sh > 0 then
          v = format('%d:%d:%d', slot, id, sh)
        else
          v = format('%d:%d', slot, id)
        end
      end
      W[nw + 1], W[nw + 2], W[nw + 3] = kx + 1, v, tts
      nw = nw + 3
      if slot and sh and sh > 0 then
        PX = PX or {}
        PX[keys[kx + 3]] = tts
      end
    end
    if own ~= oo then
      W[nw + 1], W[nw + 2], W[nw + 3] = kx + 2, own and format('%d', own), tts
      nw = nw + 3
    end
    reply[n + 1], reply[n + 2], reply[n + 3], reply[n + 4] = st, a1, a2, a3
    n = n + 4
    kx = kx + 1 + K
  end
  -- Write what changed. Redis turns a number argument into text with
  -- printf('%.17g'): TTLs repeat (a bucket under its limit is full again
  -- within a millisecond), so the last one is kept as text.
  local lt, lts = nil, nil
  for bo = 0, nb - BW, BW do
    if B[bo + 4] == 2 then
      local l, a, f = B[bo + 5], B[bo + 2], B[bo + 3]
      local ttl = fullIn(a, f, LI[l + 1], LI[l + 4], LI[l + 5], now)
      if ttl > 0 then
        if ttl ~= lt then lt, lts = ttl, format('%d', ttl) end
        local ep = EP and EP[bo]
        local v
        if ep then v = spack(STATE_E, a, f, LI[l + 1], ep) else v = spack(STATE, a, f, LI[l + 1]) end
        call('SET', RK[B[bo + 1]], v, 'PX', lts)
      else
        call('DEL', RK[B[bo + 1]])
      end
    end
  end
  for w = 0, nw - 3, 3 do
    local v = W[w + 2]
    if v then
      call('SET', keys[W[w + 1]], v, 'PX', W[w + 3])
    else
      call('DEL', keys[W[w + 1]])
    end
  end
  if PX then
    for name, ttl in pairs(PX) do call('PEXPIRE', name, ttl, 'GT') end
  end
  return reply
end
