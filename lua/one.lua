-- one.lua: decide's fast path for its most common call, one job under
-- one limit: the rules of the general path (decide.lua), in locals.

-- The shape of a call of one job under one limit, its arguments joined by
-- spaces: the short form, and the general form with K = 0, 1 or 2.
local ONE5 = '^%d+ %d+ %d+ %d+ %d+$'
local ONE9 = '^%d+ %d+ %d+ %d+ %d+ 1 %d+ %d+ %d+$'

-- refusedShift is one's reply when the shift key (KEYS[4]) cannot be
-- read: shiftRefused's, as the other paths give it.
local function refusedShift(code)
  local st, a1, a2 = shiftRefused(code, 4)
  return {st, a1, a2, 0}
end

-- one decides a call of one job under one limit, the most common call,
-- with the same rules (the same functions) as the general path (decide), but
-- keeping everything in locals: a table costs Redis about as much as a
-- thousand instructions to create and fill. Its checks are the general
-- path's, made cheaply: one pattern match over all arguments joined (a
-- match per argument costs more than the decision's arithmetic), and
-- conversion by arithmetic. A call that fails any of them is not answered
-- here (nil): the general path checks each argument on its own and names
-- the one at fault.
local function one(keys, args, nargv, K)
  local x, sn, sh, sc, si, sf = 3, args[1], '0', args[2], '0', '0'
  if nargv == 9 then
    x, sh, sc, si, sf = 7, args[2], args[3], args[4], args[5]
    if not find(concat(args, ' '), ONE9) then return nil end
  elseif not find(concat(args, ' '), ONE5) then
    return nil
  end
  local now, horizon, c, inc = 0, 0, 1, 0
  if sn ~= '0' then now = num(sn, 0, EXACT - 1) end
  if sh ~= '0' then horizon = num(sh, 0, MAX_HORIZON) end
  if sc ~= '1' then c = num(sc, 1, MAX_N) end
  if si ~= '0' then inc = num(si, 0, EXACT - 1) end
  local flags = FLAGS[sf]
  if not (now and horizon and c and inc and flags) then return nil end
  local fresh, shadow = flags % 2, flags >= 2
  local r, p, b, q, m, fill = limit(args, x, num)
  if not r or c > b then return nil end
  now = clock(now)

  -- The job's reservation (unless it is fresh) and owner; the tenant's
  -- shift (SHIFT) once the job holds or gets a slot.
  local name, resv, okey = keys[1], keys[2], keys[3]
  local slot, own, code, sid, rs, sh = false, false, nil, nil, 0, 0
  if K > 0 and fresh == 0 then
    slot = get(resv)
    if slot == nil then return {WRONGTYPE, 2, 0, 0} end
    slot, sid, rs = reserved(slot, resv)
    if slot == nil then return {INVALID, sid, 2, 0} end
    if slot and K == 3 then
      sh, code = shiftRead(keys[4])
      if sh == nil then return refusedShift(code) end
    end
  end
  if K >= 2 then
    own = get(okey)
    if own == nil then return {WRONGTYPE, 3, 0, 0} end
    own, code = stored(own, okey, E_OWNER, E_OWNER_TTL)
    if own == nil then return {INVALID, code, 3, 0} end
  end
  local so, oo = slot, own
  -- The bucket, read first for a job back to its slot: its epoch says
  -- whether the slot's debt was forgiven since (EPOCH).
  local a, f, rebased, e = nil, nil, false, 0
  if slot then
    a = get(name)
    if a == nil then return {WRONGTYPE, 1, 0, 0} end
    a, f, rebased, e = state(a, name, r, p, b, fill, now)
    if a == nil then return {INVALID, f, 1, 0} end
    -- A slot reserved under other limits, or forgiven since, is given
    -- up: decided again.
    if sid ~= regimeE(regime1(r, p), e) then slot, so = false, -1 end
  end
  local st, a1, a3
  local a2 = 0
  if slot and sh > rs then slot = slot + sh - rs end -- moved (SHIFT)
  st, a1, a3, slot, own = held(own, inc, slot, K, now)
  if st and rebased then
    call('SET', name, stateValue(a, f, r, e), 'PX', format('%d', fullIn(a, f, r, q, m, now)))
  end
  if not st then
    if not a then
      a = get(name)
      if a == nil then return {WRONGTYPE, 1, 0, 0} end
      a, f, rebased, e = state(a, name, r, p, b, fill, now)
      if a == nil then return {INVALID, f, 1, 0} end
    end
    local na, nf, wait = charge(a, f, r, p, q, m, c, now)
    local charged
    st, a1, a3, slot, own, charged = verdict(wait, K, fresh, inc, own, horizon, now, shadow)
    if slot and K == 3 and sh == 0 then
      -- A job given a slot records the shift now (read before any write).
      sh, code = shiftRead(keys[4])
      if sh == nil then return refusedShift(code) end
    end
    if charged then a, f = na, nf end
    if charged or rebased then
      -- stateValue, inlined: a call costs Redis hundreds of instructions.
      local v
      if e > 0 then v = spack(STATE_E, a, f, r, e) else v = spack(STATE, a, f, r) end
      call('SET', name, v, 'PX', format('%d', fullIn(a, f, r, q, m, now)))
    end
    if a3 == 0 then a2 = tokens(a, f, r, p, b, now) end
    if a1 > 0 then a3 = a3 + 2 end -- its one limit set the wait
  end
  if slot ~= so or own ~= oo then
    local ttl = format('%d', ceil((horizon + fill) / 1000))
    if slot ~= so then
      if slot then
        call('SET', resv, resvValue(slot, regimeE(regime1(r, p), e), sh), 'PX', ttl)
        if sh > 0 then call('PEXPIRE', keys[4], ttl, 'GT') end
      else
        call('DEL', resv)
      end
    end
    if own ~= oo then
      if own then call('SET', okey, format('%d', own), 'PX', ttl) else call('DEL', okey) end
    end
  end
  return {st, a1, a2, a3}
end
