--[[
CREDITS: a tenant's prepaid balance (the policy term `credits`), which
only an operator raises. credits___VERSION__ charges jobs against it,
refund___VERSION__ gives back what jobs that did not run were charged,
and balance___VERSION__ is the operator's: read, add, set, open the gate.
The rate decision (decide, admit) is made apart, in a call after the
charge: a tenant without credits never reaches this file.

Stored (keys built by throttle/keys.go, under the tenant's hash tag):
  balance  a hash with NO TTL (the one documented exception: an
           operator's top-up must not expire):
             b  the balance, a whole number in (-2^53, 2^53): below 0
                only by a settled cost (settle.lua), a debt no job
                draws on until a top-up covers it
             r  the master_replid of the Redis an operator op last wrote
                it on (TRUST)
             q  optional: the order of the first job waiting for credits
             g  optional: the end of the gate, µs
             o  present once an operator set or added to the balance:
                a hash without it was made by a refusal (a tenant never
                funded, or one whose balance Redis lost)
  paid     per job id, '<cost>:<incarnation>': the job was charged cost
           (the incarnation charged it, or last passed on it), PX the
           TTL the call gives, so that it is charged once however often
           it is decided, whichever incarnation comes back.

TRUST: INFO replication's master_replid changes on every restart of a
standalone server and on a failover. A balance whose r is not the
replid of now was written before Redis last restarted or failed over,
which may have lost writes after it (credits spent, say): no job is
admitted against it until an operator writes it again (add forfeits the
untrusted remainder, set overwrites it). A missing hash is a balance of
0 that is trusted: Redis lost everything, the jobs wait for a top-up,
and no credit is handed out twice. INFO is read only when a decision
needs it.

ORDER: a job refused for want of credits records its order (q) when it
is the first waiting; every later job (a higher order, or none) is
refused behind it until it is charged or a top-up (add, set) clears q.
The gate (g), which a top-up sets, refuses every job that is not a
released copy (one the top-up's release brought back, in order) until
it ends (open), so that released jobs are charged before new ones.

credits___VERSION__: charge M jobs of one tenant, in order.
KEYS[1]   the tenant's balance hash
KEYS[2..] the paid markers of the jobs that have an id (flags bit 2), in
          order
ARGV[1]   now: µs since the Unix epoch, [0, 2^53); 0 = Redis TIME
ARGV[2]   the markers' TTL, ms, [1, 31 days]
then for each job (M <= MAX_JOBS), 4 arguments:
  cost         [1, 1e9]
  order        [0, 2^53): its place among the tenant's jobs; 0 = none
  incarnation  [0, 2^53)
  flags        0 to 15. Bit 0, released: it passes the gate. Bit 1,
               shadow: it is never refused, never charged, and touches
               nothing. Bit 2: it has a marker key. Bit 3, dead-letter
               (credits:dlq): it neither records nor obeys q.
Each job, in order: 1. paid (its marker exists, or an earlier job of the
call charged it): passes, uncharged; 2. an untrusted balance refuses it;
3. an open gate (g > now) refuses it, unless released, with a wait until
g; 4. q set and its order 0 or above q refuses it; 5. a cost above the
balance (less what earlier jobs of the call took) refuses it, and its
order (when > 0) becomes q if lower; 6. else it is charged: b -= cost,
its marker set, and q deleted if it was its order. A refusal writes
nothing but q. Every argument and stored value is checked before the
first write.
Reply, 4 integers per job:
  {1, charged, balance, flags}  PASS: decide it. charged is 1 when it was
                                charged now; balance what is left. flags
                                (shadow): bit 0 enforcing would have
                                refused it, bit 1 as untrusted.
  {7, wait, balance, flags}     UNFUNDED: wait µs (the gate), or 0: wait
                                for a top-up. balance is what it could
                                not draw on; flags bit 0: untrusted.
  {3, code, position, 0}        INVALID, nothing written for it: an
                                argument (ARGV position), a stored value
                                (KEYS position). A bad now, TTL or flags
                                (the layout then cannot be read) or a bad
                                balance hash refuses every job.
  {5, position, 0, 0}           WRONGTYPE: KEYS[position]
E_* codes of credits: 25 E_CREDITS (the balance hash malformed),
26 E_PAID (a marker malformed), 27 E_PAID_TTL (a marker without TTL),
28 E_ORDER (an order out of range), 29 E_AMOUNT (an amount out of
range, or a balance it would take past 2^53 - 1); besides decide's
E_NOW, E_COST, E_INCARNATION, E_FRESH (flags), E_TTL.
]]
local UNFUNDED = 7
local E_CREDITS, E_PAID, E_PAID_TTL, E_ORDER, E_AMOUNT = 25, 26, 27, 28, 29

-- replid is the master_replid of this Redis now, or nil.
local function replid()
  return match(call('INFO', 'replication'), 'master_replid:(%w+)')
end

-- purse reads a balance hash: b, r, q, g (false when absent), whether it
-- exists, and whether it is malformed (b, q, g then unread); or nil when
-- it holds another type.
local function purse(key)
  local v = pcallr('HMGET', key, 'b', 'r', 'q', 'g')
  if v.err then
    isWrongType(v)
    return nil
  end
  local b, r, q, g = v[1], v[2], v[3], v[4]
  if not (b or r or q or g) then return 0, false, false, false, false, false end
  if b and sub(b, 1, 1) == '-' then
    -- A balance in debt (a settled cost, settle.lua): no job draws on it.
    b = whole(sub(b, 2), 1, EXACT - 1)
    if b then b = -b end
  else
    b = b and whole(b, 0, EXACT - 1)
  end
  if q then q = whole(q, 1, EXACT - 1) end
  if g then g = whole(g, 0, EXACT - 1) end
  if b == nil or b == false or q == nil or g == nil then return 0, r, false, false, true, true end
  return b, r, q, g, true, false
end

-- marker reads a paid marker: its cost and incarnation (false when
-- absent); or nil and an E_* code (WRONGTYPE for another type).
local function marker(key)
  local v = get(key)
  if v == nil then return nil, WRONGTYPE end
  if not v then return false end
  local c, inc = match(v, '^(%d+):(%d+)$')
  if c == nil or #c > 10 or #inc > 16 then return nil, E_PAID end
  if call('PTTL', key) < 0 then return nil, E_PAID_TTL end
  return c + 0, inc + 0
end

local function credits(keys, args)
  if not call then bind() end
  local na, nk = #args, #keys
  local M = (na - 2) / 4
  if nk < 1 or M < 1 or M > MAX_JOBS or M % 1 ~= 0 then
    return badcall('credits takes 2 + 4 per job arguments, 1 to ' .. MAX_JOBS .. ' jobs')
  end
  local out = {}
  local function all(t)
    for j = 1, M do out[4 * j - 3], out[4 * j - 2], out[4 * j - 1], out[4 * j] = t[1], t[2], t[3], t[4] end
    return out
  end
  -- Each job's cost, order, incarnation, flags, marker position (false
  -- for none), and the code and position of its first bad argument.
  local J, kx = {}, 1
  for j = 1, M do
    local x = 3 + 4 * (j - 1)
    local f = whole(args[x + 3], 0, 15)
    if f == nil then return all({INVALID, E_FRESH, x + 3, 0}) end
    local kp = false
    if f % 8 >= 4 then
      kx = kx + 1
      kp = kx
    end
    local c, o, inc = whole(args[x], 1, MAX_N), whole(args[x + 1], 0, EXACT - 1), whole(args[x + 2], 0, EXACT - 1)
    local e, at = 0, 0
    if c == nil then e, at = E_COST, x
    elseif o == nil then e, at = E_ORDER, x + 1
    elseif inc == nil then e, at = E_INCARNATION, x + 2 end
    J[j] = {c, o, inc, f, kp, e, at}
  end
  if kx ~= nk then return badcall('credits takes 1 key and 1 per job of flags bit 2') end
  local now = whole(args[1], 0, EXACT - 1)
  if now == nil then return all({INVALID, E_NOW, 1, 0}) end
  local ttl = whole(args[2], 1, MAX_TTL_MS)
  if ttl == nil then return all({INVALID, E_TTL, 2, 0}) end
  -- Every read before the first write.
  local b, r, q, g, exists, bad = purse(keys[1])
  if b == nil then return all({WRONGTYPE, 1, 0, 0}) end
  if bad then return all({INVALID, E_CREDITS, 1, 0}) end
  for j = 1, M do
    local t = J[j]
    if t[6] == 0 and t[5] then
      local pc, pinc = marker(keys[t[5]])
      if pc == nil and pinc == WRONGTYPE then t[6], t[7] = WRONGTYPE, t[5]
      elseif pc == nil then t[6], t[7] = pinc, t[5]
      elseif pc then t[8], t[9] = pc, pinc end
    end
  end
  now = clock(now)
  -- Trust is read (INFO) only when a job that did not pay needs it.
  local trusted = nil
  if not exists then trusted = true end
  local avail, q0 = b, q
  local paid = {} -- marker position -> {cost, incarnation} to write
  for j = 1, M do
    local c, o, inc, f, kp, e, at, pc, pinc = unpk(J[j], 1, 9)
    local shadow = f % 4 >= 2
    if e == WRONGTYPE then
      out[4 * j - 3], out[4 * j - 2], out[4 * j - 1], out[4 * j] = WRONGTYPE, at, 0, 0
    elseif e ~= 0 then
      out[4 * j - 3], out[4 * j - 2], out[4 * j - 1], out[4 * j] = INVALID, e, at, 0
    elseif kp and (pc or paid[kp]) then
      -- Paid already. Another incarnation passing on it names itself in
      -- the marker, so that a refund of the one that paid gives nothing
      -- back while this one may run.
      if not shadow and pc and pinc ~= inc and not paid[kp] then paid[kp] = {pc, inc, true} end
      out[4 * j - 3], out[4 * j - 2], out[4 * j - 1], out[4 * j] = 1, 0, avail, 0
    else
      local dlq = f >= 8
      local refuse, wait, untrusted = true, 0, false
      if trusted == nil then
        local id = replid()
        if id == nil then return redis.error_reply('ERR credits: no master_replid in INFO replication') end
        trusted = r == id
      end
      if not trusted then
        untrusted = true
      elseif g and g > now and f % 2 == 0 then
        wait = g - now
      elseif q and not dlq and (o == 0 or o > q) then
        wait = 0
      elseif c > avail then
        if not shadow and not dlq and o > 0 and (not q or o < q) then q = o end
      else
        refuse = false
      end
      local fl = 0
      if untrusted then fl = 1 end
      if shadow then
        if refuse then fl = 1 + 2 * fl end
        out[4 * j - 3], out[4 * j - 2], out[4 * j - 1], out[4 * j] = 1, 0, avail, fl
      elseif refuse then
        out[4 * j - 3], out[4 * j - 2], out[4 * j - 1], out[4 * j] = UNFUNDED, wait, avail, fl
      else
        avail = avail - c
        if kp then paid[kp] = {c, inc} end
        if q and q == o then q = false end
        out[4 * j - 3], out[4 * j - 2], out[4 * j - 1], out[4 * j] = 1, 1, avail, 0
      end
    end
  end
  for kp, v in pairs(paid) do
    if v[3] then
      call('SET', keys[kp], format('%d:%d', v[1], v[2]), 'KEEPTTL')
    else
      call('SET', keys[kp], format('%d:%d', v[1], v[2]), 'PX', ttl)
    end
  end
  if q ~= q0 and not q then
    call('HDEL', keys[1], 'q')
  elseif q ~= q0 and not exists then
    -- A missing hash is a trusted balance of 0: written so, with q.
    call('HSET', keys[1], 'b', '0', 'r', replid(), 'q', format('%d', q))
  elseif q ~= q0 then
    call('HSET', keys[1], 'q', format('%d', q))
  end
  if avail ~= b then call('HSET', keys[1], 'b', format('%d', avail)) end
  return out
end

--[[
refund___VERSION__: give back what jobs charged by credits, that did not
run, were charged (the rate decision after the charge held them back).
KEYS[1]   the tenant's balance hash
KEYS[2..] the paid markers of the jobs with an id
ARGV[1]   the cost of the jobs without an id, in all, [0, 2^53)
ARGV[2..] the incarnation that charged each marker's job, one per marker
A marker that names that incarnation is deleted and its cost given back
(one another incarnation passed on since is kept: that one may run).
The balance takes what is given back only when it exists and is trusted:
otherwise it is forfeited, as the balance is.
Reply: {1, given, balance, 0}: the credits given back and the balance
after (0 when not given back); {3, code, position, 0}: INVALID, nothing
written; {5, position, 0, 0}: WRONGTYPE.
]]
local function refund(keys, args)
  if not call then bind() end
  local nk = #keys
  if nk < 1 or #args ~= nk or nk > 1 + MAX_JOBS then
    return badcall('refund takes 1 + 1 per job keys, as many arguments')
  end
  local given = whole(args[1], 0, EXACT - 1)
  if given == nil then return {INVALID, E_AMOUNT, 1, 0} end
  local back = {}
  for k = 2, nk do
    local inc = whole(args[k], 0, EXACT - 1)
    if inc == nil then return {INVALID, E_INCARNATION, k, 0} end
    local c, pinc = marker(keys[k])
    if c == nil and pinc == WRONGTYPE then return {WRONGTYPE, k, 0, 0} end
    if c == nil then return {INVALID, pinc, k, 0} end
    if c and pinc == inc then
      back[#back + 1] = keys[k]
      given = given + c
    end
  end
  local b, r, _, _, exists, bad = purse(keys[1])
  if b == nil then return {WRONGTYPE, 1, 0, 0} end
  if bad then return {INVALID, E_CREDITS, 1, 0} end
  if #back > 0 then call('DEL', unpk(back)) end
  if given == 0 or not exists or r ~= replid() then return {1, 0, 0, 0} end
  b = b + given
  if b > EXACT - 1 then b = EXACT - 1 end
  call('HSET', keys[1], 'b', format('%d', b))
  return {1, given, b, 0}
end

--[[
balance___VERSION__: an operator's operation on a tenant's balance.
KEYS[1]  the tenant's balance hash
ARGV[1]  the operation: 1 get, 2 add, 3 set, 4 open
ARGV[2]  now: µs since the Unix epoch, [0, 2^53); 0 = Redis TIME
ARGV[3]  add: n, [1, 2^53 - 1]; set: n, [0, 2^53 - 1]; open: the gate's
         end from now, µs, [0, 30 days]; get: none
ARGV[4]  add, set: the gate's length, µs, [0, 30 days]; open, optional:
         the order of the first job a top-up left waiting, [0, 2^53)
add raises a trusted balance by n (refused, E_AMOUNT, past 2^53 - 1)
and makes an untrusted one n (its remainder is forfeited); set makes it
n, whatever it held (a malformed hash included). Both write r (TRUST),
delete q (the waiting jobs are released in order) and set the gate to
end at now + its length (none for 0). open moves the end of the gate of
a balance that exists (0: now, it ends), and makes the order it is given
(above 0) the first waiting (q) unless a lower one is, writing nothing
else: the top-up brought back only the jobs before it, which the balance
covers, and the later ones wait behind it.
Reply: {1, now, b, flags, q, g, b', flags', q', g'}: the balance before
and after (get: the same twice; open: only g' differs); flags bit 0: it
exists, bit 1: it is trusted, bit 2: an operator wrote it (o); q and g 0 for none; a malformed hash that
set overwrites reads as an untrusted balance of 0. {3, code, position, 0}:
INVALID, nothing written (E_CREDITS: a malformed hash that get, add or
open finds); {5, 1, 0, 0}: WRONGTYPE.
]]
local function balance(keys, args)
  if not call then bind() end
  local na = #args
  if #keys ~= 1 or na < 2 or na > 4 then return badcall('balance takes 1 key and 2 to 4 arguments') end
  local op = whole(args[1], 1, 4)
  if op == nil then return {INVALID, E_OP, 1, 0} end
  if (op == 1 and na ~= 2) or (op == 4 and na < 3) or ((op == 2 or op == 3) and na ~= 4) then
    return badcall('balance: get takes 2 arguments, open 3 or 4, add and set 4')
  end
  local now = whole(args[2], 0, EXACT - 1)
  if now == nil then return {INVALID, E_NOW, 2, 0} end
  local n, gate, head
  if op == 2 or op == 3 then
    local lo = 0
    if op == 2 then lo = 1 end
    n = whole(args[3], lo, EXACT - 1)
    if n == nil then return {INVALID, E_AMOUNT, 3, 0} end
    gate = whole(args[4], 0, MAX_HORIZON)
    if gate == nil then return {INVALID, E_HORIZON, 4, 0} end
  elseif op == 4 then
    gate = whole(args[3], 0, MAX_HORIZON)
    if gate == nil then return {INVALID, E_HORIZON, 3, 0} end
    head = 0
    if na == 4 then
      head = whole(args[4], 0, EXACT - 1)
      if head == nil then return {INVALID, E_ORDER, 4, 0} end
    end
  end
  local key = keys[1]
  local b, r, q, g, exists, bad = purse(key)
  if b == nil then return {WRONGTYPE, 1, 0, 0} end
  if bad and op ~= 3 then return {INVALID, E_CREDITS, 1, 0} end
  now = clock(now)
  local id = replid()
  if id == nil then return redis.error_reply('ERR balance: no master_replid in INFO replication') end
  local trusted = not exists or (r == id and not bad)
  local fl = 0
  if exists then fl = 1 end
  if trusted then fl = fl + 2 end
  if exists and call('HEXISTS', key, 'o') == 1 then fl = fl + 4 end
  local before = {1, now, b, fl, q or 0, g or 0}
  if op == 1 or (op == 4 and not exists) then
    return {1, now, b, fl, q or 0, g or 0, b, fl, q or 0, g or 0}
  end
  if op == 4 then
    if gate == 0 then
      call('HDEL', key, 'g')
      g = 0
    else
      g = now + gate
      call('HSET', key, 'g', format('%d', g))
    end
    if head > 0 and (not q or head < q) then
      q = head
      call('HSET', key, 'q', format('%d', q))
    end
    before[7], before[8], before[9], before[10] = b, fl, q or 0, g
    return before
  end
  if op == 2 and trusted then
    if b + n > EXACT - 1 then return {INVALID, E_AMOUNT, 3, 0} end
    n = b + n
  end
  if bad then call('DEL', key) end
  if gate == 0 then
    call('HSET', key, 'b', format('%d', n), 'r', id, 'o', '1')
    call('HDEL', key, 'q', 'g')
    g = 0
  else
    g = now + gate
    call('HSET', key, 'b', format('%d', n), 'r', id, 'o', '1', 'g', format('%d', g))
    call('HDEL', key, 'q')
  end
  before[7], before[8], before[9], before[10] = n, 7, 0, g
  return before
end
