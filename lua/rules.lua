-- rules.lua: the rules every function shares, each written once (see
-- head.lua): a bucket's charge, tokens, TTL and stored state, a changed
-- limit's rebase; the reads of stored values (reservations, owners,
-- regimes) and of Redis TIME; and the decisions a job's keys and its
-- charge lead to (held, verdict).

-- charge moves a bucket's empty time (a, f) forward by c tokens at now, for
-- a limit of rate r and period p whose burst*period/rate is q + m/r: first
-- to the earliest empty time a full bucket has (now - q - m/r), then by
-- c*p/r. It returns the new empty time and the wait until it (µs, rounded
-- up; <= 0 when the job fits now).
local function charge(a, f, r, p, q, m, c, now)
  local la, lf = now - q, 0
  if m > 0 then la, lf = la - 1, r - m end
  if a < la or (a == la and f < lf) then a, f = la, lf end
  local cp = c * p
  a, f = a + floor(cp / r), f + cp % r
  if f >= r then a, f = a + 1, f - r end
  local wait = a - now
  if f > 0 then wait = wait + 1 end
  return a, f, wait
end

-- tokens is the whole tokens left at now in a bucket of empty time (a, f),
-- rate r, period p and burst b, within [0, b].
local function tokens(a, f, r, p, b, now)
  local n = floor(((now - a) * r - f) / p)
  if n < 0 then return 0 elseif n > b then return b end
  return n
end

-- fullIn is the TTL of a bucket's state (ms): it is full again at its
-- empty time plus its fill time, exactly (a + f/r) - now + q + m/r µs from
-- now, rounded up. It is 0 only for a bucket full at now (rebase): such a
-- state is deleted rather than written, as a full bucket is no state.
local function fullIn(a, f, r, q, m, now)
  local whole_, frac = (a - now) + q, f + m
  if frac >= r then whole_, frac = whole_ + 1, frac - r end
  if frac > 0 then whole_ = whole_ + 1 end
  return ceil(whole_ / 1000)
end

-- EPOCH: a bucket's epoch counts the debts a rebase forgave it (CHANGE).
-- Every slot records, in its regime id, the epochs of the buckets it was
-- reserved on: a job back to a slot whose debt was forgiven since is
-- decided again, even under the limits it was reserved under (a limit A,
-- then B, then A again). A state of epoch 0 is stored as before epochs
-- (16 bytes, STATE); another with it (20 bytes, STATE_E).

-- nextEpoch is the epoch after e: 1 to 2^31 - 1, round.
local function nextEpoch(e)
  if e >= 2147483647 then return 1 end
  return e + 1
end

-- stateValue is the stored state of empty time (a, f) in rate r and
-- epoch e.
local function stateValue(a, f, r, e)
  if e and e > 0 then return spack(STATE_E, a, f, r, e) end
  return spack(STATE, a, f, r)
end

-- rebase expresses a bucket's empty time (a, f), kept in units of 1/r0 µs
-- for a limit of rate r0, for the rate r of a changed limit of the same
-- period p and burst b (see CHANGE): a bucket in debt is empty now (its
-- debt is the slots reserved under the old limit, and each of those jobs
-- is charged again when it comes back: see regime); any other keeps its
-- tokens exactly, fractions included, at most b. It returns the new empty
-- time, whether the bucket is full under the new limit (its empty time
-- is then that of a bucket full at now, the same as none: a state full
-- at now is deleted, never written, see fullIn), and whether it forgave a
-- debt: the bucket's epoch then moves on (EPOCH).
local function rebase(a, f, r0, r, p, b, now)
  if a > now or (a == now and f > 0) then return now, 0, false, true end
  -- d is the tokens held times p: (now - (a + f/r0)) * r0, exactly.
  local d = (now - a) * r0 - f
  local full = d >= b * p
  if full then d = b * p end
  a, f = now - floor(d / r), 0
  local m = d % r
  if m > 0 then a, f = a - 1, r - m end
  return a, f, full
end

-- readState reads the stored state v of a bucket: its empty time (a, f),
-- the rate it is in and its epoch (EPOCH), or nil when v is no state.
local function readState(v)
  local a, f, r0, e
  if #v == 16 then
    a, f, r0 = sunpack(STATE, v)
    e = 0
  elseif #v == 20 then
    a, f, r0, e = sunpack(STATE_E, v)
    if e < 1 then return nil end
  else
    return nil
  end
  if a < 0 or r0 < 1 or r0 > MAX_N or f < 0 or f >= r0 or a > EXACT then return nil end
  return a, f, r0, e
end

-- state reads a stored bucket state v (or false) of a limit of rate r,
-- period p, burst b and fill time fill: its empty time (a, f), (0, 0) when
-- absent, whether it was stored for another rate and rebased (it must
-- then be written, or the old rate would go on filling it), and its
-- epoch (EPOCH), moved on when the rebase forgave a debt; or nil and an
-- E_* code when it is malformed or has no TTL.
local function state(v, name, r, p, b, fill, now)
  if not v then return 0, 0, false, 0 end
  -- readState, inlined (a call costs Redis hundreds of instructions, and
  -- every decision reads a state), with checks of its own below.
  local a, f, r0, e
  if #v == 16 then
    a, f, r0 = sunpack(STATE, v)
    e = 0
  elseif #v == 20 then
    a, f, r0, e = sunpack(STATE_E, v)
    if e < 1 then return nil, E_STATE end
  else
    return nil, E_STATE
  end
  -- A state of another rate may lie further ahead: its fill time is
  -- another's, so only its range is checked.
  local far = now + MAX_HORIZON + fill
  if r0 ~= r then far = EXACT end
  if a < 0 or r0 < 1 or r0 > MAX_N or f < 0 or f >= r0 or a > far then
    return nil, E_STATE
  end
  if call('PTTL', name) < 0 then return nil, E_STATE_TTL end
  if r0 ~= r then
    local full, forgave
    a, f, full, forgave = rebase(a, f, r0, r, p, b, now)
    if forgave then e = nextEpoch(e) end
    -- A full bucket keeps nothing but its epoch: written, not deleted,
    -- when the epoch moved on.
    if full and not forgave then return 0, 0, false, e end
    return a, f, true, e
  end
  return a, f, false, e
end


-- stored reads a stored owner v (or false) of key name: its number, false
-- when absent; or nil and the E_* code eShape or eTTL when it is not at
-- most 16 digits or has no TTL.
local function stored(v, name, eShape, eTTL)
  if not v then return false end
  if #v > 16 or not find(v, '^%d+$') then return nil, eShape end
  if call('PTTL', name) < 0 then return nil, eTTL end
  return tonum(v)
end

-- RID bounds a regime id.
local RID = 2147483647

-- regime1 is the regime id of one limit of rate r and period p; regime
-- that of the L limits of a job at LI offset lo (LW slots each). A slot
-- is stored with the regime id of the limits it was reserved under: a job
-- that comes back to a slot of other limits (CHANGE) is decided again.
-- (r * 1000003 + p stays below 2^53 for every valid limit.)
local function regime1(r, p)
  return (r * 1000003 + p) % RID
end

-- regimeE is regime id id with the epochs e (their sum over a job's
-- buckets, EPOCH) folded in: id itself for 0, as before epochs.
local function regimeE(id, e)
  if not e or e == 0 then return id end
  return (id * 31 + e) % RID
end

local function regime(LI, lo, L)
  local id = 0
  for l = lo, lo + 7 * (L - 1), 7 do
    local r = LI[l + 1]
    if LI[l + 4] == -2 then
      -- A calendar window's reservation is a count in the window it was
      -- placed in, which a change of N keeps: the regime leaves N out, so
      -- the job keeps its place and is not counted twice.
      r = 2 * MAX_N
    elseif LI[l + 4] < 0 then
      r = r + MAX_N -- a window is not the bucket of its numbers
    end
    id = (id * 31 + regime1(r, LI[l + 2])) % RID
  end
  return id
end

-- reserved reads a stored reservation v (or false) of key name: its slot,
-- regime id and the tenant's shift when it was made (SHIFT), from
-- '<slot µs>:<regime id>[:<shift µs>]', false when absent; or nil and the
-- E_* code when it is malformed or has no TTL. A slot stored without a
-- regime id (by a version before live limits) has regime -1: stale; one
-- without a shift (made when the tenant had none, or by a version before
-- SHIFT) has shift 0.
local function reserved(v, name)
  if not v then return false end
  local s, i, d = match(v, '^(%d+):(%d+):(%d+)$')
  if s == nil then
    s, i = match(v, '^(%d+):(%d+)$')
    d = '0'
  end
  if s == nil then
    if #v > 16 or not find(v, '^%d+$') then return nil, E_RESV end
    s, i = v, '-1'
  elseif #s > 16 or #i > 10 or #d > 16 then
    return nil, E_RESV
  end
  if call('PTTL', name) < 0 then return nil, E_RESV_TTL end
  return tonum(s), tonum(i), tonum(d)
end

-- resvValue is the stored reservation of a slot reserved under regime id
-- and the tenant's shift d (SHIFT): the shift is left out when 0, so a
-- tenant that never settled a debt writes what versions before SHIFT read.
local function resvValue(slot, id, d)
  if d and d > 0 then return format('%d:%d:%d', slot, id, d) end
  return format('%d:%d', slot, id)
end

-- isWrongType reports whether err, an error redis.pcall returned, is
-- WRONGTYPE; any other error is raised again.
local function isWrongType(err)
  if find(err.err, 'WRONGTYPE', 1, true) then return true end
  error(err)
end

-- get reads one string key: its value (false when absent), or nil when it
-- holds another type.
local function get(name)
  local v = pcallr('GET', name)
  if type(v) == 'table' and isWrongType(v) then return nil end
  return v
end

-- getAll reads the n keys named in RK with one MGET, which answers false
-- for a key of another type as for an absent one; only when some came back
-- false does it ask EXISTS of those, and only when one of them exists does
-- it ask TYPE of each, so a key of another type is found without raising.
-- It returns the values and the set of RK positions of another type (or
-- false).
local function getAll(RK, n)
  if n == 1 then
    local v = get(RK[1])
    if v == nil then return {false}, {true} end
    return {v}, false
  end
  local V = call('MGET', unpk(RK, 1, n))
  local NK, nn = nil, 0
  for x = 1, n do
    if not V[x] then
      NK = NK or {}
      nn = nn + 1
      NK[nn] = RK[x]
    end
  end
  if nn == 0 or call('EXISTS', unpk(NK, 1, nn)) == 0 then return V, false end
  local wrong = {}
  for x = 1, n do
    if not V[x] and call('TYPE', RK[x]).ok ~= 'none' then wrong[x] = true end
  end
  return V, wrong
end

-- shiftRead reads the tenant's shift key (SHIFT): its shift, 0 when
-- absent; or nil and WRONGTYPE or the E_* code when it holds another type,
-- is malformed or has no TTL.
local function shiftRead(name)
  local v = get(name)
  if v == nil then return nil, WRONGTYPE end
  if not v then return 0 end
  if #v > 16 or not find(v, '^%d+$') then return nil, E_SHIFT end
  if call('PTTL', name) < 0 then return nil, E_SHIFT_TTL end
  return tonum(v)
end

-- shiftOf is shiftRead of the shift key name once per call, SH caching
-- what it read by name: a refusal is kept as its code, negated.
local function shiftOf(SH, name)
  local v = SH[name]
  if v == nil then
    local code
    v, code = shiftRead(name)
    if v == nil then v = -code end
    SH[name] = v
  end
  if v < 0 then return nil, -v end
  return v
end

-- shiftRefused is a job's reply tuple's first four values (and no
-- charge) when its shift key at KEYS position x is refused with code.
local function shiftRefused(code, x)
  if code == WRONGTYPE then return WRONGTYPE, x, 0, 0, false end
  return INVALID, code, x, 0, false
end

-- moved is a reserved slot moved by the shifts settled since it was
-- reserved (SHIFT): the tenant's shift now, sh, less the one it recorded,
-- rs. A shift below the recorded one (the key lost) moves nothing.
local function moved(slot, rs, sh)
  if slot and sh > rs then return slot + sh - rs end
  return slot
end

-- clock is now, or Redis TIME when now is 0.
local function clock(now)
  if now ~= 0 then return now end
  local t = call('TIME')
  return t[1] * 1000000 + t[2]
end

-- held decides a job from its job keys alone (K of them), before any
-- bucket is read: a DUPLICATE when its owner (own, or false) is another
-- incarnation than inc; and a job holding a slot (slot, or false), which
-- was charged when it got it and never again: admitted at or after its
-- slot, told the rest of its wait before. It returns the status (nil when
-- the buckets must decide), its first and last values, and the job's slot
-- and owner after the decision.
local function held(own, inc, slot, K, now)
  if own and own ~= inc then
    -- Another incarnation of this job already ran: this one must not.
    return DUPLICATE, own, 0, slot, own
  end
  if not slot then return nil, 0, 0, slot, own end
  if now >= slot then
    if K >= 2 then own = inc end
    return ADMITTED, 0, 1, false, own
  end
  return LIMITED, slot - now, 1, slot, false -- deferred again: see OWNER (head.lua)
end

-- verdict decides a job from the longest wait its charge would leave in
-- its buckets: admitted (wait <= 0), given a slot (charged) within the
-- horizon, or else limited uncharged: without a job id (K = 0) there is no
-- slot to hold, and past the horizon the job is told to come back then. A
-- shadow job is admitted whatever the wait, charged as a job with an id
-- would be (within the horizon) and holding no slot; its first value is
-- the wait it was spared. It returns the status, its first and last
-- values, the job's slot and owner after the decision, and whether the
-- charge stands.
local function verdict(wait, K, fresh, inc, own, horizon, now, shadow)
  if wait <= 0 or shadow then
    -- All but a fresh original record themselves as the owner (OWNER, head.lua).
    if K >= 2 and fresh == 0 then own = inc end
    if wait <= 0 then return ADMITTED, 0, 0, false, own, true end
    if wait <= horizon then return ADMITTED, wait, 0, false, own, true end
    if horizon > 0 then wait = horizon end
    return ADMITTED, wait, 0, false, own, false
  end
  if K > 0 and wait <= horizon then
    return LIMITED, wait, 1, now + wait, false, true -- deferred: see OWNER
  end
  if K > 0 and horizon > 0 then wait = horizon end
  return LIMITED, wait, 0, false, false, false
end
