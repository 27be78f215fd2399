--[[
settle___VERSION__: settle, once, the difference between what a job was
charged when it was admitted and the cost it reported when it ended, on
every term it was charged under: its token buckets, sliding windows,
calendar windows and credits (SETTLE in docs/design.md). One atomic call
per job; a job whose cost did not change makes none.

KEYS:
  [1]      the job's settled marker: a settle found it, nothing is done
  [2..]    one key per term, in ARGV's order: a bucket's state, a sliding
           window's set, a calendar window's hash
  then     with ARGV[6] bit 0, the tenant's credits balance (CREDITS)
  [last]   with ARGV[6] bit 1, the tenant's shift key (SHIFT, head.lua)
ARGV:
  [1]  now: µs since the Unix epoch, [0, 2^53); 0 = Redis TIME
  [2]  the marker's TTL, ms, [1, 31 days]
  [3]  direction: 1 charge (the job cost more), 2 refund (it cost less)
  [4]  the difference, [1, 1e9]
  [5]  at: the job's slot (when it was admitted), µs, [0, 2^53); 0 = now
  [6]  keys: 0 to 3; bit 0: the balance to settle follows the terms'
       keys; bit 1: the shift key is the last
  [7]  horizon, µs, [0, 30 days]: a sliding window's least TTL
  then for each term (at most MAX_LIMITS): rate, period, burst, as decide
  takes them (term, head.lua: burst 'w' a sliding window, 'c...' or
  'C...' a calendar window and its starts)

Charge d (the job cost d more):
  bucket    charged d at now (charge: from the empty time of a full
            bucket at the earliest), as decide charges a job, but never
            refused: the bucket goes into debt, its empty time at most 30
            days ahead, d at most 2^53 / period tokens. The next job waits
            until the debt is paid, exactly as after a decision of cost d.
  sliding   an admission of d units at the last admission's slot, or now
            if later (the set stays in slot order)
  calendar  d more units counted in the window holding at, unless that
            window has ended (a calendar window's count, debt included,
            ends with it); at most 1e9
  shift     with the shift key, raised by the longest time the charge
            added to a bucket's wait (its empty time past now, after less
            before: d*period/rate for a bucket in debt, less for one whose
            tokens cover part of it): every slot reserved before moves
            later by it when its job comes back (SHIFT); its TTL at least
            ARGV[2]
  credits   the balance lowered by d, below 0 if need be: no job draws on
            it until a top-up covers the debt; an untrusted balance is
            left as it is (no job draws on it anyway); a missing one
            becomes -d, trusted
Refund d (the job cost d less):
  bucket    its empty time moved back by d (at most its burst), never past
            that of a full bucket: a bucket full again is deleted
  sliding   when the job's slot still lies in the span (at > now - span),
            the oldest min(d, units in the span) units that count leave it:
            their admissions become one admission at now - span (counted
            no more), the one cut in two split, the numbering kept; a set
            left with nothing else is deleted. The units freed leave at or
            before those of the job would have.
  calendar  min(d, count) units off the window holding at, unless ended
  credits   the balance raised by d (at most 2^53 - 1), only when it
            exists and is trusted (as refund)
Every argument and stored value is checked before the first write.

Reply:
  {1, applied, shift, 0}  applied 1: settled now; 0: the marker says it
                          was settled before, and nothing was done. shift:
                          what the charge moved the reserved slots by
                          (µs), 0 for none (a refund, or no shift key).
  {3, code, position, 0}  INVALID, nothing written: an argument (ARGV
                          position) or a stored value (KEYS position)
  {5, position, 0, 0}     WRONGTYPE: KEYS[position]; nothing written
A call whose KEYS and ARGV do not fit together gets "BADCALL <reason>".
E_* codes of settle: 30 E_DIRECTION (direction or keys flag not 1 or
2, 0 to 3), 31 E_SETTLED (the marker malformed), 32 E_SETTLED_TTL (the
marker without TTL); besides E_NOW, E_TTL, E_AMOUNT, E_HORIZON, the
terms' E_RATE, E_PERIOD (also: no window passed holds at), E_BURST, and
the stored values' E_STATE, E_STATE_TTL, E_CREDITS, E_SHIFT,
E_SHIFT_TTL.
]]
local E_DIRECTION, E_SETTLED, E_SETTLED_TTL = 30, 31, 32

-- settleBucket reads the bucket of term t (rate, period, burst, q, m,
-- fill) at KEYS position k, and returns its plan: what to write, or an
-- E_* code (or WRONGTYPE) and nil.
local function settleBucket(keys, k, t, charging, d, now)
  local r, p, b, q, m, fill = unpk(t, 1, 6)
  local v = get(keys[k])
  if v == nil then return WRONGTYPE end
  local a, f, e = 0, 0, 0
  if v then
    local _
    a, f, _, e = state(v, keys[k], r, p, b, fill, now)
    if a == nil then return f end
  end
  if charging then
    -- The debt is bounded so that d*p stays exact and the empty time
    -- within what a read of the state accepts.
    local dd = d
    local most = floor((EXACT - 1) / p)
    if dd > most then dd = most end
    -- The wait the charge adds (SHIFT): after, less before, each >= 0.
    local before = a - now
    if f > 0 then before = before + 1 end
    if before < 0 then before = 0 end
    local wait
    a, f, wait = charge(a, f, r, p, q, m, dd, now)
    if a > now + MAX_HORIZON then a, f, wait = now + MAX_HORIZON, 0, MAX_HORIZON end
    local shift = wait - before
    if shift < 0 then shift = 0 end
    return {kind = 1, a = a, f = f, e = e, shift = shift}
  end
  if not v then return {kind = 0} end -- full: nothing to give back
  local dd = d
  if dd > b then dd = b end
  local dp = dd * p
  a, f = a - floor(dp / r), f - dp % r
  if f < 0 then a, f = a - 1, f + r end
  local la, lf = now - q, 0
  if m > 0 then la, lf = la - 1, r - m end
  if a < la or (a == la and f <= lf) then return {kind = 2} end -- full again
  return {kind = 1, a = a, f = f, e = e, shift = 0}
end

-- settleSliding reads the sliding window of term t at KEYS position k and
-- returns its plan, or an E_* code (or WRONGTYPE).
local function settleSliding(keys, k, t, charging, d, at, now)
  local w = {name = keys[k], p = t[2]}
  local s = windowRead(w, now)
  if s ~= 1 then return s end
  if charging then
    local slot = w.last
    if slot < now then slot = now end
    w.A = {slot, d}
    return {kind = 3, w = w}
  end
  local live = w.top - w.live + 1
  if at <= now - w.p or live <= 0 then return {kind = 0} end
  local n = d
  if n > live then n = live end
  local lo, hi = w.live, w.live + n - 1
  -- The admission after the last unit freed: cut in two when it holds
  -- some of them.
  local nx = call('ZRANGEBYSCORE', w.name, '(' .. format('%d', hi), '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  local cut = nil
  if nx[1] then
    local ts, us = match(nx[1], '^(%d+):(%d+)$')
    if not ts then return E_STATE end
    if us + 0 <= hi then cut = {nx[1], nx[2], ts} end
  end
  local from = now - w.p
  if from < 0 then from = 0 end
  -- Nothing left before or after the units freed: the set is emptied
  -- (ZREMRANGEBYSCORE deletes it), and no admission is written for them,
  -- which would make it again without a TTL.
  local empty = w.old == 0 and not nx[1]
  return {kind = 4, w = w, lo = lo, hi = hi, cut = cut, from = from, empty = empty}
end

-- settleCalendar reads the calendar window of term t (its starts in t[5])
-- at KEYS position k, ARGV position x of its rate, and returns its plan,
-- or an E_* code and its position (KEYS, or ARGV for E_PERIOD).
local function settleCalendar(keys, k, x, t, charging, d, at, now)
  local W = t[5]
  local i = nil
  for j = 1, #W - 1 do
    if W[j] <= at and at < W[j + 1] then
      i = j
      break
    end
  end
  if i == nil then return E_PERIOD, x + 2 end
  local name, field = keys[k], format('%d', W[i])
  local v = pcallr('HGET', name, field)
  if type(v) == 'table' then
    isWrongType(v)
    return WRONGTYPE, k
  end
  local pt = call('PTTL', name)
  if pt == -1 then return E_STATE_TTL, k end
  local n = 0
  if v then
    n = whole(v, 0, MAX_N)
    if n == nil then return E_STATE, k end
  end
  if W[i + 1] <= now then return {kind = 0} end -- the window ended
  if charging then
    n = n + d
    if n > MAX_N then n = MAX_N end
  elseif not v then
    return {kind = 0}
  else
    n = n - d
    if n < 0 then n = 0 end
  end
  local ttl = ceil((W[i + 1] - now) / 1000)
  if pt > ttl then ttl = pt end
  return {kind = 5, name = name, field = field, n = n, ttl = ttl}
end

-- settleCredits reads the balance at KEYS position k and returns its
-- plan, or an E_* code (or WRONGTYPE).
local function settleCredits(keys, k, charging, d)
  local b, r, _, _, exists, bad = purse(keys[k])
  if b == nil then return WRONGTYPE end
  if bad then return E_CREDITS end
  local id = replid()
  if id == nil then return redis.error_reply('ERR settle: no master_replid in INFO replication') end
  if exists and r ~= id then return {kind = 0} end -- untrusted: left
  if charging then
    b = b - d
    if b < 1 - EXACT then b = 1 - EXACT end
    return {kind = 6, b = b, id = id}
  end
  if not exists then return {kind = 0} end
  b = b + d
  if b > EXACT - 1 then b = EXACT - 1 end
  return {kind = 6, b = b, id = id}
end

local function settle(keys, args)
  if not call then bind() end
  local na, nk = #args, #keys
  local L = (na - 7) / 3
  if na < 7 or L % 1 ~= 0 or L > MAX_LIMITS then
    return badcall('settle takes 7 + 3 per term arguments, at most ' .. MAX_LIMITS .. ' terms')
  end
  local kf = FLAGS[args[6]]
  if kf == nil then return {INVALID, E_DIRECTION, 6, 0} end
  local cr, sk = kf % 2, floor(kf / 2)
  if nk ~= 1 + L + cr + sk or L + cr == 0 then
    return badcall('settle takes 1 key, 1 per term, 1 for credits and 1 for the shift, at least one term or credits')
  end
  local now = whole(args[1], 0, EXACT - 1)
  if now == nil then return {INVALID, E_NOW, 1, 0} end
  local ttl = whole(args[2], 1, MAX_TTL_MS)
  if ttl == nil then return {INVALID, E_TTL, 2, 0} end
  local dir = args[3]
  if dir ~= '1' and dir ~= '2' then return {INVALID, E_DIRECTION, 3, 0} end
  local charging = dir == '1'
  local d = whole(args[4], 1, MAX_N)
  if d == nil then return {INVALID, E_AMOUNT, 4, 0} end
  local at = whole(args[5], 0, EXACT - 1)
  if at == nil then return {INVALID, E_NOW, 5, 0} end
  local horizon = whole(args[7], 0, MAX_HORIZON)
  if horizon == nil then return {INVALID, E_HORIZON, 7, 0} end
  local T = {}
  for z = 1, L do
    local x = 8 + 3 * (z - 1)
    local r, p, b, q, m, fill = term(args, x, whole)
    if r == nil then return {INVALID, p, b, 0} end
    T[z] = {r, p, b, q, m, fill}
  end

  -- Every read, and every check, before the first write.
  local v = get(keys[1])
  if v == nil then return {WRONGTYPE, 1, 0, 0} end
  if v then
    if #v > 12 or not find(v, '^[12]:%d+$') then return {INVALID, E_SETTLED, 1, 0} end
    if call('PTTL', keys[1]) < 0 then return {INVALID, E_SETTLED_TTL, 1, 0} end
    return {1, 0, 0, 0}
  end
  now = clock(now)
  if at == 0 then at = now end
  local P = {}
  for z = 1, L do
    local t, k = T[z], z + 1
    local plan, pos
    if t[4] == -2 then
      plan, pos = settleCalendar(keys, k, 8 + 3 * (z - 1), t, charging, d, at, now)
    elseif t[4] == -1 then
      plan, pos = settleSliding(keys, k, t, charging, d, at, now), k
    else
      plan, pos = settleBucket(keys, k, t, charging, d, now), k
    end
    if plan == WRONGTYPE then return {WRONGTYPE, pos, 0, 0} end
    if type(plan) ~= 'table' then return {INVALID, plan, pos, 0} end
    P[z] = plan
  end
  local sh, shTTL = nil, ttl
  if sk == 1 then
    local code
    sh, code = shiftRead(keys[nk])
    if sh == nil then
      if code == WRONGTYPE then return {WRONGTYPE, nk, 0, 0} end
      return {INVALID, code, nk, 0}
    end
    local pt = call('PTTL', keys[nk])
    if pt > shTTL then shTTL = pt end
  end
  if cr == 1 then
    local plan = settleCredits(keys, 1 + L + 1, charging, d)
    if plan == WRONGTYPE then return {WRONGTYPE, 1 + L + 1, 0, 0} end
    if type(plan) ~= 'table' then return {INVALID, plan, 1 + L + 1, 0} end
    if plan.err then return plan end
    P[L + 1] = plan
  end

  local shift = 0
  for z = 1, #P do
    local plan = P[z]
    local kind = plan.kind
    if kind == 1 then
      local t = T[z]
      local ms = fullIn(plan.a, plan.f, t[1], t[4], t[5], now)
      if ms > 0 then
        call('SET', keys[z + 1], stateValue(plan.a, plan.f, t[1], plan.e), 'PX', format('%d', ms))
      else
        call('DEL', keys[z + 1])
      end
      if plan.shift > shift then shift = plan.shift end
    elseif kind == 2 then
      call('DEL', keys[z + 1])
    elseif kind == 3 then
      windowWrite(plan.w, now, horizon)
    elseif kind == 4 then
      local name = plan.w.name
      call('ZREMRANGEBYSCORE', name, format('%d', plan.lo), format('%d', plan.hi))
      local c = plan.cut
      if c then
        call('ZREM', name, c[1])
        call('ZADD', name, c[2], c[3] .. ':' .. format('%d', plan.hi + 1))
      end
      if not plan.empty then call('ZADD', name, format('%d', plan.hi), format('%d:%d', plan.from, plan.lo)) end
    elseif kind == 5 then
      if plan.n > 0 then
        call('HSET', plan.name, plan.field, format('%d', plan.n))
      else
        call('HDEL', plan.name, plan.field)
      end
      if call('EXISTS', plan.name) == 1 then call('PEXPIRE', plan.name, format('%d', plan.ttl)) end
    elseif kind == 6 then
      call('HSET', keys[1 + L + 1], 'b', format('%d', plan.b), 'r', plan.id)
    end
  end
  if sh and shift > 0 then
    local v = sh + shift
    if v >= EXACT then v = EXACT - 1 end
    call('SET', keys[nk], format('%d', v), 'PX', format('%d', shTTL))
  else
    shift = 0
  end
  call('SET', keys[1], dir .. ':' .. format('%d', d), 'PX', format('%d', ttl))
  return {1, 1, shift, 0}
end
