#!lua name=throttle___VERSION__
--[[
head.lua: the head of the throttle engine's Redis Functions library (Redis
7.0 or later), which Redis loads as one source: package lua (lua.go) joins
its files in this order, each one mechanism, each rule defined before what
uses it (Lua's local functions must be):

  head.lua      this contract, the constants, the argument checks
  rules.lua     the bucket's rules, the reads of stored values, the
                decisions a job's keys and charge lead to
  jobs.lua      decide's layout of a call, and its arguments' checks
  window.lua    the sliding windows (WINDOWS): read, wait, write
  calendar.lua  the calendar windows (CALENDAR): read, place, write
  one.lua       decide's fast path for one job under one limit (one)
  many.lua      decide's fast path for the worker's call (many)
  decide.lua    decide, and its general path
  owners.lua    claim, release, failed: a job's owner record and failures
  carry.lua     carry
  hold.lua      hold
  caps.lua      the running caps' sets, the waiting list, FAIR
  admit.lua     admit
  lease.lua     lease
  credits.lua   credits, refund, balance: a prepaid balance (CREDITS)
  settle.lua    settle: a job's cost settled after it ran
  groups.lua    the groups' own order at the global level
  share.lua     share, unshare: the levels above the tenant (SHARED LEVELS)
  unqueue.lua   unqueue: purged jobs out of a level's waiting list
  register.lua  the functions registered with Redis

Fifteen functions, each atomic:

  decide___VERSION__   decide M jobs against their token buckets and windows
  claim___VERSION__    make an incarnation the owner of a job that has none
  release___VERSION__  give up a job's owner record that names an incarnation
  failed___VERSION__   count a handler failure, and give the owner record up
  carry___VERSION__    carry a bucket's tokens over to a limit of another period
  hold___VERSION__     push a tenant's buckets' empty time to a later instant
  admit___VERSION__    decide one job under a running cap (RUNNING CAPS)
  lease___VERSION__    renew, release or hand on a running cap's leases
  credits___VERSION__  charge M jobs of a tenant against its credits, or
                       refuse them (UNFUNDED, 7)
  refund___VERSION__   give back the credits of jobs that did not run
  balance___VERSION__  read, add, set a tenant's credits; open the gate
  settle___VERSION__   settle once the difference between a job's charged
                       and reported cost on every term it was charged under
  share___VERSION__    decide M jobs at a level above their tenants, in turns
  unshare___VERSION__  give back a level's grants of jobs that did not run
  unqueue___VERSION__  take purged jobs out of a level's waiting list

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
  reservation  the job's slot, the regime id of the limits it was
               reserved under and the tenant's shift then,
               '<slot µs>:<id>[:<shift µs>]' (at most 16, 10 and 16
               digits; no shift: 0); a slot alone (versions before live
               limits) is of no regime: stale
  shift        the tenant's shift (SHIFT), µs, decimal (at most 16 digits)
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
of the limits it was reserved under and of their buckets' epochs (regime,
EPOCH in rules.lua: a forgiving rebase moves the bucket's epoch on), so a
job that comes back to a slot of other limits, or whose debt was forgiven
since (a limit that comes back), gives it up and is decided again,
charged under the limits of now. Any other bucket keeps the tokens it holds at that moment,
exactly (fractions included), at most the new burst, and fills at the new
rate from then on. The state is written in the new rate's units at once,
even by a call that charges nothing. So a change grants nothing by itself,
a lowered limit holds at once (the jobs waiting for their slots included)
and a raised one frees the tenant at once; two workers that disagree for a
moment about the rate charge the same bucket, each at its own. Adding or
removing a limit (rather than changing one) re-decides the slots too,
charging them again in the buckets that did not change: they wait longer,
never over-admitted. A calendar window's N is left out of the regime: its
reservations are counts in the windows they were placed in, which a
changed N keeps, so its jobs keep their slots and their order.

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

SHIFT: a settle that charges a job's debt (settle.lua) moves every slot
the tenant reserved before it later by the time the debt takes to pay
(the most over the job's buckets), keeping each job's charge and place:
it raises the tenant's shift, a cumulative µs count in a key of its own,
and every reservation records the shift when it is made. A job back with
a reservation whose shift is below the tenant's has its slot moved by
the difference: still ahead, it waits again (LIMITED, reserved, no
charge) and its reservation is rewritten with the moved slot and the
shift now; else it is admitted as before. Its buckets' empty times moved
with the debt, so later jobs are behind already. The shift key comes
with the job keys (K = 3) and is read only when a job of the call holds
or gets a slot; a reservation that records a shift above 0 extends the
key's TTL to its own (PEXPIRE GT), so the key outlives every reservation
that recorded it.

Replies: every job gets a tuple of 4 integers, one shape whatever its status:
  {1, wait,  remaining, flags}     ADMITTED: run the job now. flags bit 0:
                                   it came back for the slot it reserved (it
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
                    empty time past now + 30 days + fill time); or a
                    sliding window's admission malformed or past
                    now + 30 days + its span (WINDOWS, window.lua)
  11 E_STATE_TTL    stored state (or sliding window) has no TTL
  12 E_RESV         stored reservation malformed
  13 E_RESV_TTL     stored reservation has no TTL
  14 E_INCARNATION  incarnation not in [0, 2^53)
  15 E_OWNER        stored owner malformed
  16 E_OWNER_TTL    stored owner has no TTL
  17 E_FRESH        flags not 0, 1, 2 or 3
  18 E_TTL          TTL argument out of range
  19 E_GIVE_UP      give-up count not in [1, 1e6]
  20 E_FAILURES     stored failure counter malformed
  33 E_SHIFT        stored shift malformed (SHIFT)
  34 E_SHIFT_TTL    stored shift has no TTL
  (21 to 24: the running caps', admit.lua; 25 to 29: the credits',
  credits.lua; 30 to 32: settle's, settle.lua)

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
  credits, refund
           at most MAX_JOBS jobs, one marker key each, and the balance
  balance  one key, no loop
  share    its terms (at most MAX_LIMITS) read once before the first
           write; at most MAX_JOBS jobs, each decided as decide decides
           one job, plus at most MAX_CALLS waiting jobs called (each one
           decide); a job of a group, placed or called, reads and writes
           its group's order a bounded few times (two ZRANGEBYLEX of one
           entry); one sweep of the expired passes (ZREMRANGEBYSCORE)
  unshare  its terms read once before the first write; at most MAX_JOBS
           jobs, each refunded as settle refunds one
  unqueue  at most MAX_JOBS jobs, each a ZREM and, of a group, two
           entries of its group's order found by one ZRANGEBYLEX
  settle   one job: at most MAX_LIMITS terms read and written once each
           (a sliding window as decide reads it, plus one read; a
           calendar window one field), its marker and the balance
A sweep that stops at its bound leaves the rest expired in the set, where
they count for nothing (a lease counts while its score is after now), for
the next call; a call that left some calls nobody, so that no job passes
one whose place is still to be given back (RUNNING CAPS, caps.lua).
]]

local ADMITTED, LIMITED, INVALID, DUPLICATE, WRONGTYPE = 1, 2, 3, 4, 5
local E_NOW, E_COST, E_HORIZON = 2, 3, 4
local E_RATE, E_PERIOD, E_BURST, E_OVER_BURST = 6, 7, 8, 9
local E_STATE, E_STATE_TTL, E_RESV, E_RESV_TTL = 10, 11, 12, 13
local E_INCARNATION, E_OWNER, E_OWNER_TTL, E_FRESH = 14, 15, 16, 17
local E_TTL, E_GIVE_UP, E_FAILURES = 18, 19, 20
local E_SHIFT, E_SHIFT_TTL = 33, 34

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
local MAX_WINDOW = __MAX_WINDOW__
local MAX_CALENDAR = __MAX_CALENDAR__
local MAX_N = 1000000000 -- the largest cost, rate and burst
-- The stored state of a bucket: its empty time, whole µs and remainder,
-- and the rate the remainder is in (struct.pack's format). A state is
-- stored, until it is full again (fullIn), only when charged or rebased:
-- never full, so its TTL is never 0.
local STATE = '<i8i4i4'
-- The same with the bucket's epoch (EPOCH, rules.lua), when not 0.
local STATE_E = '<i8i4i4i4'
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

-- term checks the term whose first argument is args[x], a limit (limit)
-- or a sliding window (WINDOWS, window.lua): a window is written as a
-- limit of burst 'w', its N as the rate, its span as the period. A window
-- is returned as a limit of rate and burst N and fill time (how long an
-- admission counts) the span, marked by q = -1; or nil, an E_* code and
-- the position at fault.
local calTerm -- calendar.lua
local function term(args, x, read)
  local b = args[x + 2]
  local k = sub(b, 1, 1)
  if b ~= 'w' and k ~= 'c' and k ~= 'C' then return limit(args, x, read) end
  if b ~= 'w' then
    -- A calendar window (CALENDAR, calendar.lua): N, its unit's nominal
    -- length, and the window starts; returned as a limit of rate and
    -- burst N and fill time that length, marked by q = -2, the starts
    -- in place of m.
    local n = read(args[x], 1, MAX_N)
    if n == nil then return nil, E_RATE, x end
    local p = read(args[x + 1], 1000, MAX_PERIOD)
    if p == nil then return nil, E_PERIOD, x + 1 end
    local W = calTerm(b)
    if W == nil then return nil, E_BURST, x + 2 end
    return n, p, n, -2, W, p
  end
  local n = read(args[x], 1, MAX_WINDOW)
  if n == nil then return nil, E_RATE, x end
  local p = read(args[x + 1], 1000, MAX_PERIOD)
  if p == nil then return nil, E_PERIOD, x + 1 end
  return n, p, n, -1, 0, p
end
