#!lua name=throttle___VERSION__
--[[
library.lua: the throttle engine's Redis Functions library (Redis 7.0 or
later). Eight functions, each atomic:

  decide___VERSION__   decide M jobs against their token buckets
  claim___VERSION__    make an incarnation the owner of a job that has none
  release___VERSION__  give up a job's owner record that names an incarnation
  failed___VERSION__   count a handler failure, and give the owner record up
  carry___VERSION__    carry a bucket's tokens over to a limit of another period
  hold___VERSION__     push a tenant's buckets' empty time to a later instant
  admit___VERSION__    decide one job under a running cap (RUNNING CAPS)
  lease___VERSION__    renew, release or hand on a running cap's leases

__VERSION__ stands for a short hash of this source, put in by package
throttle before FUNCTION LOAD, so that two versions of the worker running
side by side (a rolling upgrade) each keep their own library.

Every rule is written once, as a local function of the library, which
Redis creates once, at FUNCTION LOAD, not on every call: the argument
checks (num, whole, limit), the charge (charge), the state's TTL (fullIn),
the tokens left (tokens), the stored-state format (STATE) and checks and
a changed limit's carry-over (state, rebase), the reservation
and owner reads (reserved, stored, regime), and the decisions a job's keys and its charge
lead to (held, verdict). decide orchestrates them three ways, for cost
only: one job under one limit (one), the worker's call of several jobs
under one limit each (many), and any other call (the general path). What
costs Redis in a call is its arguments (about a thousand instructions
each), its Redis commands, and every table slot it writes (a few hundred
instructions each): the paths differ in the tables they keep, never in a
rule. TestBatchMatchesSequential and the differential tests hold the paths
to each other and to x/time/rate; TestPeekAgreesWithTheEngine and
TestPeekCapsAgreeWithAdmit hold throttle's Peek, which reads the same
state in Go, to them; scripts/lua-instructions.sh counts what a call
costs.

A bucket's key names its limit's period, not its rate: a limit whose rate
or burst changes keeps its bucket (CHANGE below). Versions before live
limits named the rate too, and stored 12 bytes: their buckets are not read.

Model (the same as golang.org/x/time/rate): a limit adds `rate` tokens every
`period` microseconds up to `burst`; a job of cost c takes c tokens. Each
bucket is stored as its "empty time" E: the instant at which it held zero
tokens, so that tokens(t) = min(burst, (t - E) * rate / period). E is kept
exactly as a whole part Ei (µs) and a remainder Ef in units of 1/rate µs, so
no rounding error builds up however long a tenant stays in debt. Charging a
job moves E forward by cost*period/rate; a charge that leaves E in the future
is a debt that the job waits out: its slot is at E.

Stored values (keys built by throttle/keys.go; a tenant's keys share its
{tenant} hash tag):
  state        16 bytes, struct.pack('<i8i4i4', Ei, Ef, rate): Ef is in
               units of 1/rate µs of the rate it was stored for; lives
               until the bucket is full again
  reservation  the job's slot and the regime id of the limits it was
               reserved under, '<slot µs>:<id>' (at most 16 and 10
               digits); a slot alone (versions before live limits) is
               of no regime: stale
  owner        the incarnation admitted, decimal (at most 16 digits)
  failures     the handler failures counted, decimal (at most 15 digits)
Reservations and owners live for the horizon plus the longest time to
refill fully of the job's limits, so an idle tenant costs no memory.

Arguments: every ARGV is a decimal whole number, digits only, in the range
given ('1.5', '1e3', '-1', '', ' 1' and overflow are refused). Each is
checked before the first write.

CHANGE: a limit changes for a bucket at the first call that names the
bucket with another rate than its state was stored for (a changed burst
alone needs nothing: a stored state is never full, and the burst only caps
it). A bucket in debt is empty from then on: its debt is the slots
reserved under the old limit, and every slot is stored with the regime id
of the limits it was reserved under (regime), so a job that comes back to
a slot of other limits gives it up and is decided again, charged under the
limits of now. Any other bucket keeps the tokens it holds at that moment,
exactly (fractions included), at most the new burst, and fills at the new
rate from then on. The state is written in the new rate's units at once,
even by a call that charges nothing. So a change grants nothing by itself,
a lowered limit holds at once (the jobs waiting for their slots included)
and a raised one frees the tenant at once; two workers that disagree for a
moment about the rate charge the same bucket, each at its own. Adding or
removing a limit (rather than changing one) re-decides the slots too,
charging them again in the buckets that did not change: they wait longer,
never over-admitted.

Replies: every job gets a tuple of 4 integers, one shape whatever its status:
  {1, wait,  remaining, flags}     ADMITTED: run the job now. flags bit 0:
                                   it came back for the slot it held (it
                                   was charged then, not now; the buckets are
                                   not read and remaining is 0). wait is 0,
                                   but for a shadow job that enforcing would
                                   have held: the wait it was spared.
  {2, wait,  remaining, flags}     LIMITED: come back in `wait` µs (rounded
                                   up). flags bit 0, reserved: a slot is
                                   held for the job and it was charged
                                   (remaining is 0); else nothing was charged
                                   (no job id, or the slot would lie past
                                   the horizon: then wait = horizon).
  When one of the job's limits set the wait, flags / 2 (bits 1 to 4) is
  its position among them, counting from 1; 0 when none did (a job back
  before the slot it holds).
  {3, code,  position, 0}          INVALID: an argument or a stored value is
                                   bad; nothing was written for this job.
                                   code is an E_* value below; position the
                                   ARGV position (argument codes) or KEYS
                                   position (stored-value codes) at fault.
  {4, owner, 0, 0}                 DUPLICATE: another incarnation of this job
                                   was admitted (owner names it); this one
                                   must not run. Nothing was written.
  {5, position, 0, 0}              WRONGTYPE: KEYS[position] holds another
                                   Redis type; nothing was written for this
                                   job.
A call whose KEYS and ARGV do not fit together (never sent by package
throttle) gets the error reply "BADCALL <reason>" and writes nothing.

E_* codes (the same numbers as throttle.Code):
   2 E_NOW          now not in [0, 2^53)
   3 E_COST         cost not in [1, 1e9]
   4 E_HORIZON      horizon not in [0, 30 days]
   6 E_RATE         rate not in [1, 1e9]
   7 E_PERIOD       period not in [1000, 366 days] µs
   8 E_BURST        burst not in [1, 1e9], or burst*period >= 2^53
   9 E_OVER_BURST   the cost exceeds a burst: never admissible
  10 E_STATE        stored state malformed (length, sign, remainder >= rate,
                    empty time past now + 30 days + fill time)
  11 E_STATE_TTL    stored state has no TTL
  12 E_RESV         stored reservation malformed
  13 E_RESV_TTL     stored reservation has no TTL
  14 E_INCARNATION  incarnation not in [0, 2^53)
  15 E_OWNER        stored owner malformed
  16 E_OWNER_TTL    stored owner has no TTL
  17 E_FRESH        flags not 0, 1, 2 or 3
  18 E_TTL          TTL argument out of range
  19 E_GIVE_UP      give-up count not in [1, 1e6]
  20 E_FAILURES     stored failure counter malformed

Clock: ARGV now = 0 reads Redis TIME, once per call, after the arguments
are checked: every worker then shares one clock. Functions replicate their
effects, never themselves, so TIME is safe before writes. Tests pass an
explicit time.

BOUNDS: every call's work is bounded by numbers defined once, in package
lua (lua.go), which writes them in for the placeholders below when it
gives the library to Redis; package throttle splits larger work into
several calls, pipelined. Per call:
  decide   at most MAX_JOBS jobs of at most MAX_LIMITS limits each, and
           at most MAX_CHARGES limits in all; one reservation and one
           owner key each; no loop over stored data
  claim, release, failed, carry
           one or two keys, no loop
  hold     at most MAX_LIMITS buckets
  admit    one job as decide, plus at most MAX_SWEEP expired entries of
           the lease set dropped and MAX_CALLS waiting jobs called
  lease    renew: at most MAX_RENEW tokens; release and poke: at most
           MAX_SWEEP expired entries dropped and MAX_CALLS jobs called
A sweep that stops at its bound leaves the rest expired in the set, where
they count for nothing (a lease counts while its score is after now), for
the next call; a call that left some calls nobody, so that no job passes
one whose place is still to be given back (RUNNING CAPS).
]]

local ADMITTED, LIMITED, INVALID, DUPLICATE, WRONGTYPE = 1, 2, 3, 4, 5
local E_NOW, E_COST, E_HORIZON = 2, 3, 4
local E_RATE, E_PERIOD, E_BURST, E_OVER_BURST = 6, 7, 8, 9
local E_STATE, E_STATE_TTL, E_RESV, E_RESV_TTL = 10, 11, 12, 13
local E_INCARNATION, E_OWNER, E_OWNER_TTL, E_FRESH = 14, 15, 16, 17
local E_TTL, E_GIVE_UP, E_FAILURES = 18, 19, 20

local EXACT = 9007199254740992 -- 2^53: Lua numbers hold every integer below
local DAY = 86400000000
local MAX_HORIZON = 30 * DAY
local MAX_PERIOD = 366 * DAY
local MAX_JOBS = __MAX_JOBS__
local MAX_LIMITS = __MAX_LIMITS__
local MAX_CHARGES = __MAX_CHARGES__
local MAX_RENEW = __MAX_RENEW__
local MAX_SWEEP = __MAX_SWEEP__
local MAX_CALLS = __MAX_CALLS__
local MAX_MEMBER = __MAX_MEMBER__
local MAX_N = 1000000000 -- the largest cost, rate and burst
-- The stored state of a bucket: its empty time, whole µs and remainder,
-- and the rate the remainder is in (struct.pack's format). A state is
-- stored, until it is full again (fullIn), only when charged or rebased:
-- never full, so its TTL is never 0.
local STATE = '<i8i4i4'
-- A job's flags argument: 1 fresh, 2 shadow, 3 both.
local FLAGS = {['0'] = 0, ['1'] = 1, ['2'] = 2, ['3'] = 3}

-- While a library loads, Redis gives it no global but `redis`: the standard
-- functions are bound on the first call (bind) and kept as upvalues, which
-- are cheaper to reach than globals.
local call, pcallr, find, match, sub, tonum, format, concat, floor, ceil, spack, sunpack, unpk

local function bind()
  call, pcallr = redis.call, redis.pcall
  find, match, sub, format, tonum, concat = string.find, string.match, string.sub, string.format, tonumber, table.concat
  floor, ceil = math.floor, math.ceil
  spack, sunpack, unpk = struct.pack, struct.unpack, unpack
end

-- badcall refuses a call whose KEYS and ARGV do not fit together.
local function badcall(why)
  return redis.error_reply('BADCALL ' .. why)
end

-- num reads s, known to be digits only, as a whole number in [lo, hi], or
-- nil. (s + 0 converts once; tonumber converts twice.)
local function num(s, lo, hi)
  local n = s + 0
  if n < lo or n > hi then
    return nil
  end
  return n
end

-- whole reads s as a whole number in [lo, hi]: digits only. It returns nil
-- for anything else (a sign, a point, an exponent, spaces, '', overflow).
local function whole(s, lo, hi)
  if s == nil or not find(s, '^%d+$') then
    return nil
  end
  return num(s, lo, hi)
end

-- limit checks the limit whose rate is args[x], then its period and burst,
-- each read by read (whole, or num when they are known to be digits): it
-- returns rate, period, burst, the quotient and remainder of
-- burst*period/rate, and the fill time (µs, rounded up); or nil, an E_*
-- code and the position at fault.
local function limit(args, x, read)
  local r = read(args[x], 1, MAX_N)
  if r == nil then return nil, E_RATE, x end
  local p = read(args[x + 1], 1000, MAX_PERIOD)
  if p == nil then return nil, E_PERIOD, x + 1 end
  local b = read(args[x + 2], 1, MAX_N)
  if b == nil or b * p >= EXACT then return nil, E_BURST, x + 2 end
  local bp = b * p
  local q, m = floor(bp / r), bp % r
  local fill = q
  if m > 0 then fill = fill + 1 end
  return r, p, b, q, m, fill
end

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

-- rebase expresses a bucket's empty time (a, f), kept in units of 1/r0 µs
-- for a limit of rate r0, for the rate r of a changed limit of the same
-- period p and burst b (see CHANGE): a bucket in debt is empty now (its
-- debt is the slots reserved under the old limit, and each of those jobs
-- is charged again when it comes back: see regime); any other keeps its
-- tokens exactly, fractions included, at most b. It returns the new empty
-- time, and whether the bucket is full under the new limit: its empty
-- time is then that of a bucket full at now, the same as none (a state
-- full at now is deleted, never written: see fullIn).
local function rebase(a, f, r0, r, p, b, now)
  if a > now or (a == now and f > 0) then return now, 0, false end
  -- d is the tokens held times p: (now - (a + f/r0)) * r0, exactly.
  local d = (now - a) * r0 - f
  local full = d >= b * p
  if full then d = b * p end
  a, f = now - floor(d / r), 0
  local m = d % r
  if m > 0 then a, f = a - 1, r - m end
  return a, f, full
end

-- state reads a stored bucket state v (or false) of a limit of rate r,
-- period p, burst b and fill time fill: its empty time (a, f), (0, 0) when
-- absent, and whether it was stored for another rate and rebased (it must
-- then be written, or the old rate would go on filling it); or nil and an
-- E_* code when it is malformed or has no TTL.
local function state(v, name, r, p, b, fill, now)
  if not v then return 0, 0, false end
  if #v ~= 16 then return nil, E_STATE end
  local a, f, r0 = sunpack(STATE, v)
  -- A state of another rate may lie further ahead: its fill time is
  -- another's, so only its range is checked.
  local far = now + MAX_HORIZON + fill
  if r0 ~= r then far = EXACT end
  if a < 0 or r0 < 1 or r0 > MAX_N or f < 0 or f >= r0 or a > far then
    return nil, E_STATE
  end
  if call('PTTL', name) < 0 then return nil, E_STATE_TTL end
  if r0 ~= r then
    local full
    a, f, full = rebase(a, f, r0, r, p, b, now)
    if full then return 0, 0, false end -- nothing to keep
    return a, f, true
  end
  return a, f, false
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

local function regime(LI, lo, L)
  local id = 0
  for l = lo, lo + 7 * (L - 1), 7 do
    id = (id * 31 + regime1(LI[l + 1], LI[l + 2])) % RID
  end
  return id
end

-- reserved reads a stored reservation v (or false) of key name: its slot
-- and regime id ('<slot µs>:<regime id>'), false when absent; or nil and
-- the E_* code when it is malformed or has no TTL. A slot stored without
-- a regime id (by a version before live limits) has regime -1: stale.
local function reserved(v, name)
  if not v then return false end
  local s, i = match(v, '^(%d+):(%d+)$')
  if s == nil then
    if #v > 16 or not find(v, '^%d+$') then return nil, E_RESV end
    s, i = v, '-1'
  elseif #s > 16 or #i > 10 then
    return nil, E_RESV
  end
  if call('PTTL', name) < 0 then return nil, E_RESV_TTL end
  return tonum(s), tonum(i)
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
    if K == 2 then own = inc end
    return ADMITTED, 0, 1, false, own
  end
  return LIMITED, slot - now, 1, slot, false -- deferred again: see OWNER
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
    -- All but a fresh original record themselves as the owner (OWNER).
    if K == 2 and fresh == 0 then own = inc end
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

--[[
decide___VERSION__: one atomic decision for each of M jobs, in order, as if
by M calls: jobs that name the same bucket share it, and a later job sees
what the earlier ones did. A job that must wait gets a reserved slot (it is
charged once, and admitted without a second charge when it comes back), and
a job that may exist as several messages (OWNER below) runs only once.

KEYS, for each job in order: its L_k state keys (one per limit), then its K
job keys, the same K for every job of the call:
  K = 0  none: the job has no id; nothing is reserved
  K = 1  its reservation key
  K = 2  its reservation key and its owner key
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

Reply: the M tuples of 4 integers above, one after the other. A bad now or
horizon makes every job INVALID.

OWNER: a job may be moved off its queue (re-published to fire at its slot)
and the original acked. If the worker dies between the two, both the
original and the copy exist (and a move redone after a long outage can even
leave two copies). With K = 2 an incarnation that is admitted records itself
as the owner (all but a fresh original admitted at once: never decided
before, it has no copy); any other incarnation that comes later is a
DUPLICATE. An owner that comes back and is deferred again (its handler
failed, its worker stopped, or Redis answered too late for the worker to
hear it was admitted) did not run: it gives ownership up (the owner key is
deleted), since the worker may move it, and its copy must then be free to
run.
]]

-- Jobs, JW slots each from offset o: cost, incarnation, flags, LI
-- offset of its first limit, its number of limits, and its entry (EN
-- offset, or false). A job refused while its arguments are read has its
-- code and position in BAD, at o and o + 1. (Every slot written costs Redis
-- a few hundred instructions: the tables hold only what is read again.)
local JW = 6
-- Limits, LW slots each: rate, period, burst, q and m (burst*period/rate =
-- q + m/rate), fill time (µs); and, at the first limit of a set (the
-- limits of a job), the longest fill time of the set.
local LW = 7
-- Buckets, BW slots each: RK position (its name, read), empty time (a, f),
-- status (0 not read, 1 read, 2 changed, WRONGTYPE, or the E_* code of a
-- bad state), LI offset of the limit in whose rate its empty time is.
local BW = 5
-- Entries (one per job id), EW slots each: KEYS position of the
-- reservation (the owner's is the next), RK positions of both (false when
-- not read), status (0 not checked, 1 checked, WRONGTYPE or an E_* code),
-- slot (µs, or false; the KEYS position at fault when bad), owner
-- (incarnation, or false), and the slot's regime id. What changed is kept
-- apart, in CHG.
local EW = 7

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
        local r, p, b, q, m, f = limit(args, z, whole)
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
  if (K ~= 0 and K ~= 1 and K ~= 2) or (short and K ~= 0) then
    return nil, 'KEYS do not fit ARGV'
  end
  return M, J, K, LI, BAD
end

-- The shape of a call of one job under one limit, its arguments joined by
-- spaces: the short form, and the general form with K = 0, 1 or 2.
local ONE5 = '^%d+ %d+ %d+ %d+ %d+$'
local ONE9 = '^%d+ %d+ %d+ %d+ %d+ 1 %d+ %d+ %d+$'

-- one decides a call of one job under one limit, the most common call,
-- with the same rules (the same functions) as the general path below, but
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

  -- The job's reservation (unless it is fresh) and owner.
  local name, resv, okey = keys[1], keys[2], keys[3]
  local slot, own, code, sid = false, false, nil, nil
  if K > 0 and fresh == 0 then
    slot = get(resv)
    if slot == nil then return {WRONGTYPE, 2, 0, 0} end
    slot, sid = reserved(slot, resv)
    if slot == nil then return {INVALID, sid, 2, 0} end
  end
  if K == 2 then
    own = get(okey)
    if own == nil then return {WRONGTYPE, 3, 0, 0} end
    own, code = stored(own, okey, E_OWNER, E_OWNER_TTL)
    if own == nil then return {INVALID, code, 3, 0} end
  end
  local so, oo = slot, own
  -- A slot reserved under other limits is given up: decided again.
  if slot and sid ~= regime1(r, p) then slot, so = false, -1 end
  local st, a1, a3
  local a2 = 0
  st, a1, a3, slot, own = held(own, inc, slot, K, now)
  if not st then
    -- The bucket.
    local a, f, rebased = get(name), nil, false
    if a == nil then return {WRONGTYPE, 1, 0, 0} end
    a, f, rebased = state(a, name, r, p, b, fill, now)
    if a == nil then return {INVALID, f, 1, 0} end
    local na, nf, wait = charge(a, f, r, p, q, m, c, now)
    local charged
    st, a1, a3, slot, own, charged = verdict(wait, K, fresh, inc, own, horizon, now, shadow)
    if charged then a, f = na, nf end
    if charged or rebased then
      call('SET', name, spack(STATE, a, f, r), 'PX', format('%d', fullIn(a, f, r, q, m, now)))
    end
    if a3 == 0 then a2 = tokens(a, f, r, p, b, now) end
    if a1 > 0 then a3 = a3 + 2 end -- its one limit set the wait
  end
  if slot ~= so or own ~= oo then
    local ttl = format('%d', ceil((horizon + fill) / 1000))
    if slot ~= so then
      if slot then call('SET', resv, format('%d:%d', slot, regime1(r, p)), 'PX', ttl) else call('DEL', resv) end
    end
    if own ~= oo then
      if own then call('SET', okey, format('%d', own), 'PX', ttl) else call('DEL', okey) end
    end
  end
  return {st, a1, a2, a3}
end

-- many decides the worker's call, several jobs under one limit each, each
-- job id named once, with the same rules (the same functions) as the
-- general path below, but with fewer tables and fewer slots in them: the
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
  if j ~= nargv + 1 or M > MAX_JOBS or (K ~= 0 and K ~= 1 and K ~= 2) then return nil end
  local now, horizon = whole(args[1], 0, EXACT - 1), whole(args[2], 0, MAX_HORIZON)
  if not (now and horizon) then return nil end

  -- Limits, 7 slots each from offset 0, 7, ...: rate, period, burst, q, m,
  -- fill time, and the TTL of a job key (ms, as text). Jobs, 5 slots each:
  -- cost, incarnation, flags, offset of its limit, offset of its
  -- bucket. Buckets, 6 slots each: KEYS position, RK position, empty time
  -- (a, f), status (0 not read, 1 read, 2 changed, or an E_* code or
  -- WRONGTYPE), offset of the limit in whose rate its empty time is. RK names the
  -- buckets to read, JK the job keys (in job order: the reservation unless
  -- the job is fresh, and with K = 2 the owner).
  local LI, J, B, byName, RK, JK = {}, {}, {}, {}, {}, {}
  local seen = K > 0 and {}
  local nl, nb, nr, nj, o = -7, 0, 0, 0, 0
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
      nl = nl + 7
      LI[nl + 1], LI[nl + 2], LI[nl + 3], LI[nl + 4], LI[nl + 5], LI[nl + 6] = r, p, b, q, m, fill
      LI[nl + 7] = format('%d', ceil((horizon + fill) / 1000))
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
      nb = nb + 6
      byName[name] = bo
      nr = nr + 1
      RK[nr] = name
      B[bo + 1], B[bo + 2], B[bo + 5] = kx, nr, 0
    end
    if K > 0 then
      local resv = keys[kx + 1]
      if seen[resv] then return nil end
      seen[resv] = true
      if flags % 2 == 0 then
        nj = nj + 1
        JK[nj] = resv
      end
      if K == 2 then
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

  -- Decide each job in order, in memory. Writes to job keys are listed in
  -- W (KEYS position, value or false to delete, TTL) and made at the end,
  -- with the buckets.
  local reply, W = {}, {}
  local n, nw, jx = 0, 0, 0
  o, kx = 0, 1
  for k = 1, M do
    local c, inc, flags, lo, bo = J[o + 1], J[o + 2], J[o + 3], J[o + 4], J[o + 5]
    local fresh = flags % 2
    o = o + 5
    local st, a1, a2, a3 = nil, 0, 0, 0
    local slot, own, code, sid = false, false, nil, nil
    if K > 0 and fresh == 0 then
      jx = jx + 1
      if jwrong and jwrong[jx] then
        st, a1 = WRONGTYPE, kx + 1
      elseif JV[jx] then
        slot, sid = reserved(JV[jx], keys[kx + 1])
        if slot == nil then st, a1, a2, slot = INVALID, sid, kx + 1, false end
      end
    end
    if K == 2 then
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
    -- A slot reserved under another limit is given up: decided again.
    if slot and sid ~= regime1(LI[lo + 1], LI[lo + 2]) then slot, so = false, -1 end
    if not st and (slot or own) then st, a1, a3, slot, own = held(own, inc, slot, K, now) end
    if not st then
      local s = B[bo + 5]
      if s == 0 then
        local x = B[bo + 2]
        if wrong and wrong[x] then
          s = WRONGTYPE
        else
          local a, f, rebased = 0, 0, false
          if V[x] then a, f, rebased = state(V[x], RK[x], LI[lo + 1], LI[lo + 2], LI[lo + 3], LI[lo + 6], now) end
          if a then
            B[bo + 3], B[bo + 4], s = a, f, 1
            -- Which limit's rate the state is in is written only when it
            -- must be (a slot written costs Redis hundreds of
            -- instructions): at a charge, or here when it was rebased.
            if rebased then B[bo + 6], s = lo, 2 end
          else
            s = f
          end
        end
        B[bo + 5] = s
      end
      if s == WRONGTYPE then
        st, a1 = WRONGTYPE, B[bo + 1]
      elseif s ~= 1 and s ~= 2 then
        st, a1, a2 = INVALID, s, B[bo + 1]
      else
        local r, u = LI[lo + 1], B[bo + 6]
        if u and u ~= lo and LI[u + 1] ~= r then
          -- A job before, in this call, named the bucket at another rate.
          B[bo + 3], B[bo + 4] = rebase(B[bo + 3], B[bo + 4], LI[u + 1], r, LI[lo + 2], LI[lo + 3], now)
          B[bo + 5], B[bo + 6] = 2, lo
        end
        local a, f, wait = charge(B[bo + 3], B[bo + 4], r, LI[lo + 2], LI[lo + 4], LI[lo + 5], c, now)
        local charged
        st, a1, a3, slot, own, charged = verdict(wait, K, fresh, inc, own, horizon, now, flags >= 2)
        if charged then
          B[bo + 3], B[bo + 4], B[bo + 5], B[bo + 6] = a, f, 2, lo
        elseif not u then
          B[bo + 6] = lo -- read in this limit's rate, and kept in it
        end
        if a3 == 0 then a2 = tokens(B[bo + 3], B[bo + 4], r, LI[lo + 2], LI[lo + 3], now) end
        if a1 > 0 then a3 = a3 + 2 end -- its one limit set the wait
      end
    end
    if st == WRONGTYPE or st == INVALID then
      slot, own = so, oo
    end
    if slot ~= so then
      W[nw + 1], W[nw + 2], W[nw + 3] = kx + 1, slot and format('%d:%d', slot, regime1(LI[lo + 1], LI[lo + 2])), LI[lo + 7]
      nw = nw + 3
    end
    if own ~= oo then
      W[nw + 1], W[nw + 2], W[nw + 3] = kx + 2, own and format('%d', own), LI[lo + 7]
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
  for bo = 0, nb - 6, 6 do
    if B[bo + 5] == 2 then
      local l, a, f = B[bo + 6], B[bo + 3], B[bo + 4]
      local ttl = fullIn(a, f, LI[l + 1], LI[l + 4], LI[l + 5], now)
      if ttl > 0 then
        if ttl ~= lt then lt, lts = ttl, format('%d', ttl) end
        call('SET', keys[B[bo + 1]], spack(STATE, a, f, LI[l + 1]), 'PX', lts)
      else
        call('DEL', keys[B[bo + 1]])
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
  return reply
end

local function decide(keys, args)
  if not call then bind() end
  local nargv, nkeys = #args, #keys
  if nargv == 5 and nkeys == 1 then
    local reply = one(keys, args, 5, 0)
    if reply then return reply end
  elseif nargv == 9 and nkeys >= 1 and nkeys <= 3 and args[6] == '1' then
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
  local EN, byResv = nil, nil
  local nb, ne, nr = 0, 0, 0
  if K > 0 then EN, byResv = {}, {} end
  local key = 1 -- KEYS position of the job's first state key
  for o = 0, JW * (M - 1), JW do
    local first = key
    local last = first + J[o + 5] - 1
    key = last + 1 + K
    if not (BAD and BAD[o]) then
      for y = first, last do
        local name = keys[y]
        local bo = byName[name]
        if bo == nil then
          bo = nb
          nb = nb + BW
          byName[name] = bo
          nr = nr + 1
          RK[nr] = name
          B[bo + 1], B[bo + 4] = nr, 0
        end
        kb[y] = bo
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
          if K == 2 then
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
  end

  -- Decide each job in order, in memory; every write is made at the end.
  -- CHG holds, per changed entry, the TTL of its keys (ms, as text) and
  -- whether its slot and its owner changed.
  local CH, CHG = {}, nil
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
          slot, code = reserved(V[rx], keys[rk])
          if slot == nil then es, slot = code, rk else EN[e + 7] = code end
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
      -- A slot reserved under other limits is given up: decided again.
      if slot and EN[e + 7] ~= regime(LI, lo, L) then slot, so = false, -1 end
      st, a1, a3, slot, own = held(own, inc, slot, K, now)
      if not st then
        -- Read each bucket once, and charge the job in every one, on paper
        -- (CH), finding the longest wait and the limit (its position z)
        -- that sets it.
        local wait, wz, i, l = 0, 0, 0, lo
        for y = first, last do
          local bo = kb[y]
          local s = B[bo + 4]
          if s == 0 then
            local x = B[bo + 1]
            if wrong and wrong[x] then
              s = WRONGTYPE
            else
              local a, f, rebased = 0, 0, false
              if V[x] then a, f, rebased = state(V[x], keys[y], LI[l + 1], LI[l + 2], LI[l + 3], LI[l + 6], now) end
              if a then
                B[bo + 2], B[bo + 3], s = a, f, 1
                if rebased then B[bo + 5], s = l, 2 end -- see many
              else
                s = f
              end
            end
            B[bo + 4] = s
          end
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
            B[bo + 2], B[bo + 3] = rebase(B[bo + 2], B[bo + 3], LI[u + 1], r, LI[l + 2], LI[l + 3], now)
            B[bo + 4], B[bo + 5] = 2, l
          end
          local a, f, w = charge(B[bo + 2], B[bo + 3], r, LI[l + 2], LI[l + 4], LI[l + 5], c, now)
          CH[i + 1], CH[i + 2] = a, f
          if w > wait then wait, wz = w, i / 2 end
          i = i + 2
          l = l + LW
        end
        if not st then
          local charged
          st, a1, a3, slot, own, charged = verdict(wait, K, fresh, inc, own, horizon, now, flags >= 2)
          if a1 > 0 then a3 = a3 + 2 * (wz + 1) end
          if charged then
            i, l = 0, lo
            for y = first, last do
              local bo = kb[y]
              B[bo + 2], B[bo + 3], B[bo + 4], B[bo + 5] = CH[i + 1], CH[i + 2], 2, l
              i, l = i + 2, l + LW
            end
          end
          if a3 % 2 == 0 then
            -- Remaining: the whole tokens left in the tightest bucket.
            l = lo
            for y = first, last do
              local bo = kb[y]
              local t = tokens(B[bo + 2], B[bo + 3], LI[l + 1], LI[l + 2], LI[l + 3], now)
              if y == first or t < a2 then a2 = t end
              l = l + LW
            end
          end
        end
      end
      if e and (slot ~= so or own ~= oo) then
        CHG = CHG or {}
        local ttl = ceil((horizon + LI[lo + 7]) / 1000)
        if ttl ~= lt then lt, lts = ttl, format('%d', ttl) end
        CHG[e + 1] = lts
        if slot ~= so then
          EN[e + 5], CHG[e + 2] = slot, true
          if slot then EN[e + 7] = regime(LI, lo, L) end
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
        call('SET', RK[B[bo + 1]], spack(STATE, a, f, LI[l + 1]), 'PX', lts)
      else
        call('DEL', RK[B[bo + 1]])
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
            call('SET', keys[rk], format('%d:%d', EN[e + 5], EN[e + 7]), 'PX', ttl)
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

-- owner reads the owner record of a job, KEYS[at], outside a decision:
-- the incarnation it names (false for none), or nil and the reply that
-- refuses the call.
local function owner(keys, at)
  local name = keys[at]
  local v = get(name)
  if v == nil then return nil, {WRONGTYPE, at, 0, 0} end
  local own, code = stored(v, name, E_OWNER, E_OWNER_TTL)
  if own == nil then return nil, {INVALID, code, at, 0} end
  return own
end

--[[
claim___VERSION__: make an incarnation the owner of a job (see decide,
OWNER) if no incarnation owns it. The worker's fast lane claims a job this
way before it copies the job out of a backlog.

KEYS[1]  the job's owner key
ARGV[1]  the incarnation, [0, 2^53)
ARGV[2]  the record's TTL in ms, [1, 31 days]

Reply:
  {1, claimed, owner, 0}  claimed is 1 when the record was written, else 0;
                          owner is the incarnation it names after the call
  {3, code, position, 0}  INVALID (E_INCARNATION, E_TTL, E_OWNER,
                          E_OWNER_TTL); nothing written
  {5, 1, 0, 0}            WRONGTYPE: KEYS[1] holds another type
]]
local function claim(keys, args)
  if not call then bind() end
  if #keys ~= 1 or #args ~= 2 then return badcall('claim takes 1 key and 2 arguments') end
  local inc = whole(args[1], 0, EXACT - 1)
  if inc == nil then return {INVALID, E_INCARNATION, 1, 0} end
  local ttl = whole(args[2], 1, 31 * 86400000)
  if ttl == nil then return {INVALID, E_TTL, 2, 0} end
  local own, refused = owner(keys, 1)
  if own == nil then return refused end
  if own then return {1, 0, own, 0} end
  call('SET', keys[1], format('%d', inc), 'PX', args[2])
  return {1, 1, inc, 0}
end

--[[
release___VERSION__: give up a job's owner record if it names an
incarnation (compare and delete).

KEYS[1]  the job's owner key
ARGV[1]  the incarnation, [0, 2^53)

Reply:
  {1, released, owner, 0}  released is 1 when the record was deleted, else
                           0; owner is the incarnation the record names
                           after the call, -1 for none
  {3, code, position, 0}   INVALID (E_INCARNATION, E_OWNER, E_OWNER_TTL);
                           nothing written
  {5, 1, 0, 0}             WRONGTYPE: KEYS[1] holds another type
]]
local function release(keys, args)
  if not call then bind() end
  if #keys ~= 1 or #args ~= 1 then return badcall('release takes 1 key and 1 argument') end
  local inc = whole(args[1], 0, EXACT - 1)
  if inc == nil then return {INVALID, E_INCARNATION, 1, 0} end
  local own, refused = owner(keys, 1)
  if own == nil then return refused end
  if own ~= inc then return {1, 0, own or -1, 0} end
  call('DEL', keys[1])
  return {1, 1, -1, 0}
end

--[[
failed___VERSION__: count one more handler failure of a job, atomically with
the counter's TTL (INCR then PEXPIRE as two client commands could leave a
counter that never expires), and, with an owner key, give up the job's owner
record.

KEYS[1]  the job's failure counter
KEYS[2]  optional: the job's owner key
ARGV[1]  the counter's TTL in ms, [1, 30 days]
ARGV[2]  with KEYS[2]: the incarnation that failed, [0, 2^53)
ARGV[3]  with KEYS[2]: the count at which the job is given up, [1, 1e6]

With KEYS[2], while the count stays below ARGV[3] the owner record is
deleted if it names the incarnation that failed: it did not run to success,
so the next incarnation (a moved copy, say) must be free to run. At ARGV[3]
the record is kept: the job is given up, and no other incarnation may run it.

Reply:
  {1, count, released, 0}  the failures counted so far, this one included;
                           released is 1 when the owner record was deleted
  {3, code, position, 0}   INVALID (E_TTL, E_INCARNATION, E_GIVE_UP,
                           E_FAILURES, E_OWNER, E_OWNER_TTL); nothing
                           written
  {5, position, 0, 0}      WRONGTYPE: KEYS[position] holds another type
]]
local function failed(keys, args)
  if not call then bind() end
  local nk = #keys
  if nk < 1 or nk > 2 or #args ~= 2 * nk - 1 then return badcall('failed takes 1 key and 1 argument, or 2 and 3') end
  local ttl = whole(args[1], 1, MAX_HORIZON)
  if ttl == nil then return {INVALID, E_TTL, 1, 0} end
  local inc, giveUpAt
  if nk == 2 then
    inc = whole(args[2], 0, EXACT - 1)
    if inc == nil then return {INVALID, E_INCARNATION, 2, 0} end
    giveUpAt = whole(args[3], 1, 1000000)
    if giveUpAt == nil then return {INVALID, E_GIVE_UP, 3, 0} end
  end
  -- Every read before the first write.
  local v = get(keys[1])
  if v == nil then return {WRONGTYPE, 1, 0, 0} end
  if v and (#v > 15 or not find(v, '^%d+$')) then return {INVALID, E_FAILURES, 1, 0} end
  local own = false
  if nk == 2 then
    local refused
    own, refused = owner(keys, 2)
    if own == nil then return refused end
  end
  local n = call('INCR', keys[1])
  call('PEXPIRE', keys[1], args[1])
  local released = 0
  if own and own == inc and n < giveUpAt then
    call('DEL', keys[2])
    released = 1
  end
  return {1, n, released, 0}
end

redis.register_function('decide___VERSION__', decide)
redis.register_function('claim___VERSION__', claim)
redis.register_function('release___VERSION__', release)
--[[
carry___VERSION__: carry a tenant's bucket over to a limit of another
period (CHANGE names a bucket by its period, so a changed period would
start a new, full bucket). The worker calls it when a tenant's limit
changes period, before it decides anything under the new limit.

KEYS[1]  the bucket of the old limit
KEYS[2]  the bucket of the new limit
ARGV[1]  now: µs since the Unix epoch, [0, 2^53); 0 = Redis TIME
ARGV[2]  the old limit's period, µs, [1000, 366 days]
ARGV[3..5]  the new limit: rate, period, burst (as decide reads them)

If the new bucket exists (a worker carried it already, or decided under the
new limit) nothing is done. Otherwise the new bucket gets the whole tokens
the old one holds now, at most the new burst: a bucket in debt holds none
(its slots' jobs are decided again: regime). A full result is the same as
none, and is not written. The old bucket is deleted.

Reply:
  {1, carried, tokens, 0}  carried is 1 when the new bucket was written or
                           the old one held nothing to carry, else 0;
                           tokens is what the new bucket holds
  {3, code, position, 0}   INVALID (an argument, or E_STATE/E_STATE_TTL of
                           KEYS[1]); nothing written
  {5, position, 0, 0}      WRONGTYPE
]]
local function carry(keys, args)
  if not call then bind() end
  if #keys ~= 2 or #args ~= 5 then return badcall('carry takes 2 keys and 5 arguments') end
  local now = whole(args[1], 0, EXACT - 1)
  if now == nil then return {INVALID, E_NOW, 1, 0} end
  local p0 = whole(args[2], 1000, MAX_PERIOD)
  if p0 == nil then return {INVALID, E_PERIOD, 2, 0} end
  local r, p, b, q, m, fill = limit(args, 3, whole)
  if r == nil then return {INVALID, p, b, 0} end
  now = clock(now)
  local to = get(keys[2])
  if to == nil then return {WRONGTYPE, 2, 0, 0} end
  if to then return {1, 0, 0, 0} end
  local v = get(keys[1])
  if v == nil then return {WRONGTYPE, 1, 0, 0} end
  if not v then return {1, 1, b, 0} end
  if #v ~= 16 then return {INVALID, E_STATE, 1, 0} end
  local a, f, r0 = sunpack(STATE, v)
  if a < 0 or r0 < 1 or r0 > MAX_N or f < 0 or f >= r0 or a > EXACT then return {INVALID, E_STATE, 1, 0} end
  if call('PTTL', keys[1]) < 0 then return {INVALID, E_STATE_TTL, 1, 0} end
  call('DEL', keys[1])
  -- The whole tokens held now: (now - (a + f/r0)) * r0 / p0.
  local n = 0
  if a < now or (a == now and f == 0) then n = floor(((now - a) * r0 - f) / p0) end
  if n >= b then return {1, 1, b, 0} end
  -- Empty n tokens ago at the new rate: n * p / r before now.
  local d = n * p
  local na, nf = now - floor(d / r), 0
  local rem = d % r
  if rem > 0 then na, nf = na - 1, r - rem end
  call('SET', keys[2], spack(STATE, na, nf, r), 'PX', format('%d', fullIn(na, nf, r, q, m, now)))
  return {1, 1, n, 0}
end

redis.register_function('failed___VERSION__', failed)
redis.register_function('carry___VERSION__', carry)
--[[
hold___VERSION__: hold a tenant back until an instant, fleet-wide: the
worker calls it when the tenant's downstream asked it to wait (HTTP 429, or
503 with Retry-After), so that no worker starts another of its jobs before
then. Each bucket's empty time is set to at least `until`: the bucket holds
no token before then, and refills from then on at its rate. A bucket whose
empty time is already later (slots reserved past `until`) keeps it; jobs
holding slots before `until` still run at their slots (they were charged
then), so a hold delays new charges only.

KEYS[1..n]  the tenant's enforced buckets, 1 to 8
ARGV[1]     now: µs since the Unix epoch, [0, 2^53); 0 = Redis TIME
ARGV[2]     until: µs since the Unix epoch, at most now + 30 days
ARGV[3..]   each bucket's limit: rate, period, burst (as decide reads
            them), three per key, so that an absent state can be written

A bucket is written in its limit's rate units (a state of another rate is
rebased first, as decide does), with the TTL of a state that is full again
at its empty time plus its fill time. An `until` not after now does nothing.

Reply:
  {1, held, 0, 0}          held: the buckets whose empty time moved
  {3, code, position, 0}   INVALID (E_NOW, E_HORIZON for until, a limit's
                           E_RATE/E_PERIOD/E_BURST, E_STATE/E_STATE_TTL of
                           a key); nothing written
  {5, position, 0, 0}      WRONGTYPE: KEYS[position] holds another type;
                           nothing written
]]
local function hold(keys, args)
  if not call then bind() end
  local n = #keys
  if n < 1 or n > MAX_LIMITS or #args ~= 2 + 3 * n then
    return badcall('hold takes 1 to 8 keys and 2 + 3 per key arguments')
  end
  local now = whole(args[1], 0, EXACT - 1)
  if now == nil then return {INVALID, E_NOW, 1, 0} end
  local untilAt = whole(args[2], 0, EXACT - 1)
  if untilAt == nil then return {INVALID, E_HORIZON, 2, 0} end
  local L = {}
  for k = 1, n do
    local r, p, b, q, m, fill = limit(args, 3 * k, whole)
    if r == nil then return {INVALID, p, b, 0} end
    L[k] = {r, p, b, q, m, fill}
  end
  now = clock(now)
  if untilAt > now + MAX_HORIZON then return {INVALID, E_HORIZON, 2, 0} end
  if untilAt <= now then return {1, 0, 0, 0} end
  -- Every read before the first write.
  local W = {}
  for k = 1, n do
    local v = get(keys[k])
    if v == nil then return {WRONGTYPE, k, 0, 0} end
    local r, p, b, q, m, fill = unpk(L[k])
    local a, f, rebased = state(v, keys[k], r, p, b, fill, now)
    if a == nil then return {INVALID, f, k, 0} end
    W[k] = {a, f, rebased}
  end
  local held = 0
  for k = 1, n do
    local r, _, _, q, m = unpk(L[k])
    local a, f, rebased = unpk(W[k])
    if a < untilAt then
      a, f, rebased = untilAt, 0, true
      held = held + 1
    end
    if rebased then
      call('SET', keys[k], spack(STATE, a, f, r), 'PX', format('%d', fullIn(a, f, r, q, m, now)))
    end
  end
  return {1, held, 0, 0}
end

redis.register_function('hold___VERSION__', hold)

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
slot and burns none.

admit___VERSION__: decide one job under a running cap.

KEYS[1]     the cap's lease set
KEYS[2]     the cap's waiting list
KEYS[3]     the cap's places hash: the places of the jobs called
KEYS[4..]   the job's keys for decide: its buckets, reservation and owner
            (with no limits: its reservation and owner); for the fleet's
            cap, which decides no rate, its fair-queue hash (FAIR)
ARGV[1]     N, the cap, [1, 1e6]
ARGV[2]     the run's owner token, 1 to 64 of [0-9a-zA-Z_-]
ARGV[3]     the lease TTL, ms, [1, 30 days]
ARGV[4]     the call TTL, ms, [1, 30 days]
ARGV[5]     the TTL of the sets and of an owner record written, ms,
            [1, 31 days]: at least the horizon plus the call and lease TTLs
ARGV[6]     the job's member in the waiting list, 1 to MAX_MEMBER bytes
            without spaces: its job id (in the fleet's list,
            '<tenant>/<job id>')
ARGV[7]     its place in a tenant's list should it join: its order of
            arrival (the worker gives the stream sequence of its first
            delivery, so that the list keeps the order jobs were published
            in, whichever worker took each), [0, 2^53); 0 for the time of
            the call. The fleet's places are fair instead (FAIR): there,
            1 says the job was called by its tenant's cap (it joins at the
            head), 0 that it was not
ARGV[8..]   decide's arguments for the one job, in its general form: now,
            horizon, cost, incarnation, flags, number of limits n (0 to
            MAX_LIMITS), and 3n limit arguments; for the fleet's cap, now
            alone

Every argument and stored value is checked before the first write (the
job's buckets, reservation and owner as decide checks them, and its cost
against each burst): a refusal writes nothing.

Reply: decide's tuple for the job, then the members called, as strings:
  {1, ...}, {2, ...}, {3, ...}, {4, ...}, {5, ...} as decide, positions
                           counted in admit's KEYS and ARGV; ADMITTED holds
                           the lease ARGV[2] until now + lease TTL
  {6, ahead, running, 0}   CAPPED: the cap is full; the job waits in the
                           list behind `ahead` jobs; `running` leases
                           count. Nothing is charged; an owner record
                           naming this incarnation is given up (it did not
                           run: its parked copy must be free to).
E_* codes of the caps (besides decide's):
  21 E_CAP     N not in [1, 1e6]
  22 E_TOKEN   the owner token malformed
  23 E_MEMBER  the waiting-list member malformed
  24 E_OP      lease's operation unknown
At most MAX_CALLS jobs are called per call; the rest are called by later
calls as leases free.
]]
local CAPPED = 6
-- The E_* codes whose position names a key (a stored value), not an
-- argument.
local STORED = {[E_STATE] = true, [E_STATE_TTL] = true, [E_RESV] = true, [E_RESV_TTL] = true,
  [E_OWNER] = true, [E_OWNER_TTL] = true, [E_FAILURES] = true}
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

-- jobCheck checks what decide would read of admit's one job, before any
-- write: its cost against each burst, its buckets' states and its
-- reservation (unless fresh). n limits from ARGV[14], buckets from
-- KEYS[CAPKEYS + 1]. It returns nil, or the reply that refuses the job.
local function jobCheck(keys, args, n, fresh, t)
  local c = args[10] + 0
  for k = 1, n do
    local x, y = 11 + 3 * k, CAPKEYS + k
    local r, p, b, _, _, fill = limit(args, x, num)
    if c > b then return {INVALID, E_OVER_BURST, x + 2, 0} end
    local v = get(keys[y])
    if v == nil then return {WRONGTYPE, y, 0, 0} end
    local a, code = state(v, keys[y], r, p, b, fill, t)
    if a == nil then return {INVALID, code, y, 0} end
  end
  if not fresh then
    local y = CAPKEYS + n + 1
    local v = get(keys[y])
    if v == nil then return {WRONGTYPE, y, 0, 0} end
    local slot, code = reserved(v, keys[y])
    if slot == nil then return {INVALID, code, y, 0} end
  end
  return nil
end

local function admit(keys, args)
  if not call then bind() end
  local nk, na = #keys, #args
  if nk < 3 or na < 8 then return badcall('admit takes at least 3 keys and 8 arguments') end
  local N, leaseUs, callUs, recordTTL, now = capArgs(args[1], args[3], args[4], args[5], args[8], {1, 3, 4, 5, 8})
  if N == nil then return {INVALID, leaseUs, callUs, 0} end
  local token, member = args[2], args[6]
  if not validToken(token) then return {INVALID, E_TOKEN, 2, 0} end
  if not validMember(member) then return {INVALID, E_MEMBER, 6, 0} end
  local order = whole(args[7], 0, EXACT - 1)
  if order == nil then return {INVALID, E_MEMBER, 7, 0} end
  local L, W, P = keys[1], keys[2], keys[3]
  local rated, n, inc, fresh, ownerAt = false, 0, 0, false, nil
  if na > 8 then
    if na < 13 then return badcall('admit takes 8 arguments, or 13 and 3 per limit') end
    n = whole(args[13], 0, MAX_LIMITS)
    if n == nil or na ~= 13 + 3 * n or nk ~= CAPKEYS + 2 + n then
      return badcall('admit takes 5 keys and 13 arguments, and one key and 3 arguments per limit')
    end
    if whole(args[9], 0, MAX_HORIZON) == nil then return {INVALID, E_HORIZON, 9, 0} end
    if whole(args[10], 1, MAX_N) == nil then return {INVALID, E_COST, 10, 0} end
    inc = whole(args[11], 0, EXACT - 1)
    if inc == nil then return {INVALID, E_INCARNATION, 11, 0} end
    local fl = FLAGS[args[12]]
    if fl == nil then return {INVALID, E_FRESH, 12, 0} end
    fresh = fl % 2 == 1
    for x = 14, na, 3 do
      local r, code, at = limit(args, x, whole)
      if r == nil then return {INVALID, code, at, 0} end
    end
    rated, ownerAt = n > 0, nk
  elseif nk ~= CAPKEYS + 1 then
    return badcall('admit for the fleet takes 4 keys')
  end
  local V, ten = nil, nil
  if na == 8 then
    V, ten = keys[4], match(member, '^([^/]+)/.')
    if not ten then return {INVALID, E_MEMBER, 6, 0} end
  end
  local t = clock(now)

  -- Every read that may refuse the call before the first write.
  local live, refused = capCheck(L, W, P, V, t)
  if live == nil then return refused end
  local own = false
  if ownerAt then
    own, refused = owner(keys, ownerAt)
    if own == nil then return refused end
    if own and own ~= inc then return {DUPLICATE, own, 0, 0} end
  end
  if rated then
    refused = jobCheck(keys, args, n, fresh, t)
    if refused then return refused end
  end

  local swept = expire(L, W, P, t)
  local ph = 'c:' .. member
  local mine = call('ZSCORE', L, ph)
  mine = mine and tonum(mine) > t
  local rank = call('ZRANK', W, member)
  local nw = call('ZCARD', W)
  local ahead = rank or nw
  local place = order > 0 and order or t
  if V and not rank then
    if order > 0 then
      place = tonum(call('HGET', V, '') or 0) or 0 -- called: at the head
    else
      place = fairPlace(V, ten)
    end
    -- A job at the same place is counted ahead: one of them goes first.
    ahead = call('ZCOUNT', W, '-inf', format('%d', place))
  end
  local free = N - live
  if mine then free, ahead = free + 1, 0 end
  -- Room is handed on only when the sweep is done (expire).
  local callN = function(k) if swept then return callWaiters(L, W, P, k, t + callUs, args[5], V) end end
  local reply, called
  if free > ahead then
    if rated then
      local da = {unpk(args, 8, na)}
      da[1] = format('%d', t)
      reply = decide({unpk(keys, CAPKEYS + 1, nk)}, da)
      if reply.err then return reply end
      -- Checked above, so never refused here; positions in admit's terms.
      if reply[1] == WRONGTYPE then
        reply[2] = reply[2] + CAPKEYS
      elseif reply[1] == INVALID then
        reply[3] = reply[3] + (STORED[reply[2]] and CAPKEYS or 7)
      end
    else
      reply = {ADMITTED, 0, 0, 0}
      if ownerAt and not fresh then
        call('SET', keys[ownerAt], format('%d', inc), 'PX', args[5])
      end
    end
    local st = reply[1]
    if st == ADMITTED then
      if mine then
        call('ZREM', L, ph)
        call('HDEL', P, member)
      end
      if rank then call('ZREM', W, member) end
      call('ZADD', L, format('%d', t + leaseUs), token)
      called = callN(ahead)
    elseif st == LIMITED then
      if mine then
        call('ZADD', L, format('%d', t + reply[2] + callUs), ph)
      else
        if rank then call('ZREM', W, member) end
        called = callN(free)
      end
    end
  else
    if own and own == inc then call('DEL', keys[ownerAt]) end
    if not rank then
      call('ZADD', W, 'NX', format('%d', place), member)
      if V and order == 0 then
        call('HSET', V, ten, format('%d', place))
        call('PEXPIRE', V, args[5])
      end
    end
    called = callN(free)
    reply = {CAPPED, ahead, live, 0}
  end
  call('PEXPIRE', L, args[5])
  call('PEXPIRE', W, args[5])
  if called then
    for i = 1, #called do reply[4 + i] = called[i] end
  end
  return reply
end

--[[
lease___VERSION__: renew, release or hand on a cap's leases.

KEYS[1]   the cap's lease set
KEYS[2]   the cap's waiting list
KEYS[3]   the cap's places hash
KEYS[4]   the fleet's cap only: its fair-queue hash (FAIR)
ARGV[1]   the operation: 1 release, 2 renew, 3 poke
ARGV[2]   now: µs since the Unix epoch, [0, 2^53); 0 = Redis TIME
ARGV[3]   N, the cap now, [1, 1e6]
ARGV[4]   the lease TTL, ms, [1, 30 days]
ARGV[5]   the call TTL, ms, [1, 30 days]
ARGV[6]   the sets' TTL, ms, [1, 31 days]
ARGV[7..] release: the one token (or placeholder 'c:<member>') to delete;
          renew: the tokens to renew, 1 to MAX_RENEW; poke: none

release deletes the lease named by the token, and only that one (compare
and delete), then hands the room free to the head of the waiting list, as
admit does. renew moves each named lease that still counts to now + lease
TTL; a lease that expired is not renewed (its room may be another run's).
poke drops expired leases and hands the room free to the head of the list:
a lease that expired frees no room until a call sees it.

Reply: {1, n, more, 0, members...}: release: n is 1 when the lease was
deleted, then the members called; renew: n leases renewed, then the tokens
not renewed; poke: 0, then the members called. more (release and poke) is
1 when expired entries are left for another call to drop (BOUNDS): the
caller pokes again. {3, code, position, 0}: INVALID, nothing written;
{5, position, 0, 0}: WRONGTYPE.
]]
local function lease(keys, args)
  if not call then bind() end
  local na = #args
  local nk = #keys
  if (nk ~= 3 and nk ~= 4) or na < 6 then return badcall('lease takes 3 or 4 keys and at least 6 arguments') end
  local op = whole(args[1], 1, 3)
  if op == nil then return {INVALID, E_OP, 1, 0} end
  if (op == 1 and na ~= 7) or (op == 2 and (na < 7 or na > 6 + MAX_RENEW)) or (op == 3 and na ~= 6) then
    return badcall('lease: release takes 1 token, renew 1 to ' .. MAX_RENEW .. ', poke none')
  end
  local N, leaseUs, callUs, _, now = capArgs(args[3], args[4], args[5], args[6], args[2], {3, 4, 5, 6, 2})
  if N == nil then return {INVALID, leaseUs, callUs, 0} end
  for x = 7, na do
    local tk = args[x]
    if not (validToken(tk) or (op == 1 and find(tk, '^c:') and validMember(sub(tk, 3)))) then
      return {INVALID, E_TOKEN, x, 0}
    end
  end
  local L, W, P = keys[1], keys[2], keys[3]
  local t = clock(now)
  local live, refused = capCheck(L, W, P, keys[4], t)
  if live == nil then return refused end
  local reply = {1, 0, 0, 0}
  if op == 2 then
    local scores = call('ZMSCORE', L, unpk(args, 7, na))
    local d, z, nz, lost = format('%d', t + leaseUs), {}, 0, 4
    for x = 7, na do
      local s = scores[x - 6]
      if s and tonum(s) > t then
        z[nz + 1], z[nz + 2] = d, args[x]
        nz = nz + 2
      else
        lost = lost + 1
        reply[lost] = args[x]
      end
    end
    if nz > 0 then
      call('ZADD', L, 'XX', unpk(z, 1, nz))
      call('PEXPIRE', L, args[6])
    end
    reply[2] = nz / 2
    return reply
  end
  local swept = expire(L, W, P, t)
  if op == 1 then
    local s = call('ZSCORE', L, args[7])
    if s then
      call('ZREM', L, args[7])
      if find(args[7], '^c:') then call('HDEL', P, sub(args[7], 3)) end
      reply[2] = 1
      if tonum(s) > t then live = live - 1 end
    end
  end
  if not swept then
    reply[3] = 1
  else
    local called = callWaiters(L, W, P, N - live, t + callUs, args[6], keys[4])
    for i = 1, #called do reply[4 + i] = called[i] end
  end
  call('PEXPIRE', L, args[6])
  call('PEXPIRE', W, args[6])
  return reply
end

redis.register_function('admit___VERSION__', admit)
redis.register_function('lease___VERSION__', lease)
