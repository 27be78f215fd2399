--[[
RUNNING CAPS: admit___VERSION__ and lease___VERSION__ keep a tenant (or the
whole fleet) to at most N jobs running at once. Each run holds a lease: a
member of the cap's lease set (a sorted set), named by an owner token
unique to that run, scored by the instant (µs) it expires. A worker renews
its leases while their jobs run, and deletes each by its own token when the
job ends (compare and delete: ZREM of a member only this run names), so a
late worker can never free a lease given to someone else; the lease of a
worker that died expires by itself. A lease counts while its score is
after now.

A job that finds the cap full does not run, and is not charged: it joins
the cap's waiting list (a sorted set of job ids, scored by its place:
first come, first served) and the worker parks it. When a lease frees,
the call that frees it hands the room to the head of the list: each job
called gets a placeholder lease, member 'c:<job id>', that holds its place
for the call TTL, and its id is returned for the caller to wake it; its
place in the list is kept in the cap's places hash (job id -> place). The
job, back, finds its placeholder and turns it into its own lease. A
placeholder whose job does not come back in time expires like a lease, and
the job goes back into the list at the place it had (expire), so however
many expire at once, they are at the head again, in the order they had,
and called first by the next call that frees room, rather than wait for
their parked copies' fallback time. A call drops at most MAX_SWEEP expired
entries; one that leaves some calls nobody, so that no job is called past
one that is still to go back into the list.

Rate and cap together: the cap is decided first. A job that may have a
lease is then decided by decide (same arguments, same rules, same reply):
admitted, it takes the lease; told to wait for a rate slot, it takes no
lease (a job that was called keeps its placeholder until its slot plus the
call TTL, so its turn is not lost). A job waiting for a lease holds no rate
slot and burns none. admit.lua and lease.lua hold the two functions'
contracts; this file the sets' mechanics they share.
]]
local CAPPED = 6
-- The E_* codes whose position names a key (a stored value), not an
-- argument.
local STORED = {[E_STATE] = true, [E_STATE_TTL] = true, [E_RESV] = true, [E_RESV_TTL] = true,
  [E_OWNER] = true, [E_OWNER_TTL] = true, [E_FAILURES] = true, [E_SHIFT] = true, [E_SHIFT_TTL] = true}
local E_CAP, E_TOKEN, E_MEMBER, E_OP = 21, 22, 23, 24
local MAX_TTL_MS = 31 * 86400000
-- The KEYS before a job's own in admit: lease set, list, places.
local CAPKEYS = 3

-- zread runs a read command on a key, or returns nil when the key
-- holds another type.
local function zread(...)
  local v = pcallr(...)
  if type(v) == 'table' and v.err and isWrongType(v) then return nil end
  return v
end

-- callWaiters hands room for n jobs (at most MAX_CALLS) to the head of
-- the waiting list W: each gets a placeholder lease in L until deadline
-- (µs), and its place is kept in P; the sets written live ttl ms. It
-- returns their members, for the caller to wake. With the fair-queue hash
-- V (the fleet's list), it records the place of the last one called as
-- the list's virtual time (FAIR).
local function callWaiters(L, W, P, n, deadline, ttl, V)
  if n <= 0 then return {} end
  if n > MAX_CALLS then n = MAX_CALLS end
  local ids = call('ZRANGE', W, 0, n - 1, 'WITHSCORES')
  local nid = #ids / 2
  if nid == 0 then return {} end
  local d = format('%d', deadline)
  local out, z, h = {}, {}, {}
  for i = 1, nid do
    local id, place = ids[2 * i - 1], ids[2 * i]
    out[i] = id
    z[2 * i - 1], z[2 * i] = d, 'c:' .. id
    h[2 * i - 1], h[2 * i] = id, place
  end
  call('ZADD', L, unpk(z, 1, 2 * nid))
  call('HSET', P, unpk(h, 1, 2 * nid))
  call('PEXPIRE', P, ttl)
  call('ZREM', W, unpk(out, 1, nid))
  if V then
    call('HSET', V, '', ids[2 * nid])
    call('PEXPIRE', V, call('PTTL', W) > 0 and call('PTTL', W) or 86400000)
  end
  return out
end

-- expire drops at most MAX_SWEEP of the leases and placeholders of L that
-- expired by t, the earliest first. A job whose placeholder expired
-- (called, and not back within the call TTL: its waker died, or Redis lost
-- the reply that called it) goes back into W at the place P kept for it
-- (a placeholder of a version that kept none: at the head), so that the
-- jobs called and not back are at the head of the list again, in the order
-- they had. It returns whether no expired entry is left.
local function expire(L, W, P, t)
  local gone = call('ZRANGE', L, '-inf', t, 'BYSCORE', 'LIMIT', 0, MAX_SWEEP + 1)
  local n = #gone
  if n == 0 then return true end
  local done = n <= MAX_SWEEP
  if not done then n = MAX_SWEEP end
  local ids, ni = {}, 0
  for i = 1, n do
    local id = match(gone[i], '^c:(.+)$')
    if id then
      ni = ni + 1
      ids[ni] = id
    end
  end
  if ni > 0 then
    local places = call('HMGET', P, unpk(ids, 1, ni))
    local z, head = {}, nil
    for i = 1, ni do
      local place = places[i]
      if not place then
        if head == nil then
          -- Before the head, as many as have no place, in their order.
          local h, missing = call('ZRANGE', W, 0, 0, 'WITHSCORES'), 0
          for k = i, ni do
            if not places[k] then missing = missing + 1 end
          end
          head = (h[2] and tonum(h[2]) or 0) - missing - 1
        end
        head = head + 1
        place = format('%d', head)
      end
      z[2 * i - 1], z[2 * i] = place, ids[i]
    end
    call('ZADD', W, 'NX', unpk(z, 1, 2 * ni))
    call('HDEL', P, unpk(ids, 1, ni))
  end
  call('ZREM', L, unpk(gone, 1, n))
  return done
end

--[[
FAIR: the fleet's waiting list holds every tenant's jobs, and first come,
first served would let one tenant's backlog make every other tenant wait
behind all of it. So its places are virtual start times (start-time fair
queueing): a tenant's job joins at max(V, F[tenant]) + 1, where V is the
place of the job called last and F[tenant] the place of the tenant's job
that joined last (both in the fair-queue hash). The tenants with jobs
waiting are then called in turn, one job each, and each tenant's jobs in
the order they came. A job its tenant's cap called (it holds a place
there) joins at V instead, the head, and moves no F: at the back of its
tenant's own jobs it would wait behind jobs that its tenant's cap, whose
room it holds meanwhile, must then hold back in turn.
]]

-- fairPlace is where the fleet's job of tenant ten joins the list with
-- the fair-queue hash V.
local function fairPlace(V, ten)
  local v = call('HMGET', V, '', ten)
  return math.max(tonum(v[1] or 0) or 0, tonum(v[2] or 0) or 0) + 1
end

-- capArgs checks the arguments admit and lease share: N, the TTLs (ms)
-- and the time. It returns them, or nil, an E_* code and its position.
local function capArgs(n, leaseTTL, callTTL, recordTTL, now, at)
  local N = whole(n, 1, 1000000)
  if N == nil then return nil, E_CAP, at[1] end
  local lt = whole(leaseTTL, 1, MAX_HORIZON / 1000)
  if lt == nil then return nil, E_TTL, at[2] end
  local ct = whole(callTTL, 1, MAX_HORIZON / 1000)
  if ct == nil then return nil, E_TTL, at[3] end
  local rt = whole(recordTTL, 1, MAX_TTL_MS)
  if rt == nil then return nil, E_TTL, at[4] end
  local t = whole(now, 0, EXACT - 1)
  if t == nil then return nil, E_NOW, at[5] end
  return N, lt * 1000, ct * 1000, rt, t
end

-- validToken reports whether s may name a lease: 1 to 64 of [0-9a-zA-Z_-],
-- so that no token can be taken for a placeholder ('c:...').
local function validToken(s)
  return s ~= nil and #s >= 1 and #s <= 64 and find(s, '^[%w_%-]+$') ~= nil
end

-- validMember reports whether s may be a member of a waiting list.
local function validMember(s)
  return #s >= 1 and #s <= MAX_MEMBER and not find(s, '%s')
end

-- capCheck reads the sets of a cap before any write: the leases that
-- count at t, or nil and the WRONGTYPE reply when a set (or the fair-queue
-- hash V) holds another type.
local function capCheck(L, W, P, V, t)
  local live = zread('ZCOUNT', L, format('(%d', t), '+inf')
  if live == nil then return nil, {WRONGTYPE, 1, 0, 0} end
  if zread('ZCARD', W) == nil then return nil, {WRONGTYPE, 2, 0, 0} end
  if zread('HLEN', P) == nil then return nil, {WRONGTYPE, 3, 0, 0} end
  if V and zread('HLEN', V) == nil then return nil, {WRONGTYPE, 4, 0, 0} end
  return live
end

-- termCheck checks one term (its arguments from ARGV x, its bucket
-- KEYS[y]) as decide would read it for a job of cost c at t, before any
-- write: the cost against its burst, and its stored state. It returns
-- nil, or the reply that refuses the job.
local function termCheck(keys, y, args, x, c, t)
  local r, p, b, q, m, fill = term(args, x, num)
  if c > b then return {INVALID, E_OVER_BURST, x + 2, 0} end
  if q < 0 then
    -- A sliding window (WINDOWS, window.lua).
    local s
    if q == -2 then
      s = calRead({name = keys[y], W = m}, t) -- CALENDAR
    else
      s = windowRead({name = keys[y], p = p}, t)
    end
    if s == WRONGTYPE then return {WRONGTYPE, y, 0, 0} end
    if s ~= 1 then return {INVALID, s, y, 0} end
    return nil
  end
  local v = get(keys[y])
  if v == nil then return {WRONGTYPE, y, 0, 0} end
  local a, code = state(v, keys[y], r, p, b, fill, t)
  if a == nil then return {INVALID, code, y, 0} end
  return nil
end

-- jobCheck checks what decide would read of admit's one job, before any
-- write: its cost against each burst, its buckets' states and its
-- reservation (unless fresh). n limits from ARGV[14], buckets from
-- KEYS[CAPKEYS + 1]. It returns nil, or the reply that refuses the job.
local function jobCheck(keys, args, n, fresh, t)
  local c = args[10] + 0
  for k = 1, n do
    local x, y = 11 + 3 * k, CAPKEYS + k
    local refused = termCheck(keys, y, args, x, c, t)
    if refused then return refused end
  end
  if not fresh then
    local y = CAPKEYS + n + 1
    local v = get(keys[y])
    if v == nil then return {WRONGTYPE, y, 0, 0} end
    local slot, code = reserved(v, keys[y])
    if slot == nil then return {INVALID, code, y, 0} end
  end
  local y = CAPKEYS + n + 3
  if keys[y] then
    local sh, code = shiftRead(keys[y]) -- SHIFT (head.lua)
    if sh == nil then
      local st, a1, a2 = shiftRefused(code, y)
      return {st, a1, a2, 0}
    end
  end
  return nil
end
