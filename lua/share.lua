--[[
SHARED LEVELS: share___VERSION__ and unshare___VERSION__ decide jobs
under a limit above the tenant (a group's or the global one), shared by
many tenants' jobs, and share it among them in turns (SHARE in
docs/design.md).

A level is its terms (token buckets, sliding and calendar windows, decided
by decide's own function), a waiting list, a fair-queue hash and a pass
set. A job is granted the level when its terms give it a slot within a
short lookahead of now and no other flow's job waits ahead of it in fair
order: it is charged, and its slot, when in the future or to be kept, is
recorded in the pass set (member -> slot). Otherwise it joins the waiting
list, uncharged, at a fair place (start-time fair queueing, as the fleet's
running cap, caps.lua FAIR): max(V, F[flow]) + cost / weight, V the place
of the job called last, F[flow] the place of its flow's job that joined
last. A flow is a tenant, or a group at the global level. Every call then
*calls* the head of the list while the terms give it a slot within the
call lookahead: charged, recorded in the pass set, and returned for the
caller to wake. Back, the job finds its pass and goes on.

A flow that asks for less than its share finds no job of another flow
ahead of it and is granted at once; a flow with a backlog waits in the
list and is called in turn with the others, each flow's jobs in the order
they joined.

A list member is '<cost>/<tenant>/<job id>': the call step reads the
head's cost from it, the waker the tenant and job id.

KEYS: [1] the waiting list, [2] the fair-queue hash, [3] the pass set,
[4] a scratch key (decide's reservation, never read), [5..4+n] one
state key per term, as decide's, [5+n] the groups' order (GROUPS AT THE
GLOBAL LEVEL).
ARGV:
  [1]  now: µs since the Unix epoch; 0 = Redis TIME
  [2]  the call lookahead, µs, [0, 60 s]; 'n' for no call step (a caller
       that cannot wake the jobs called, the fast lane)
  [3]  the direct lookahead, µs, [call lookahead, 60 s]
  [4]  the TTL of the list, hash and passes, and how long a pass lasts
       past its slot, ms, [1, 31 days]
  [5]  n, the terms, [0, MAX_LIMITS]: 0 for a level without a limit now,
       whose queued jobs are all handed back; then 3n terms as decide's
  then for each job (at most MAX_JOBS): its member, its flow (its tenant,
  or at the global level its group), its cost (the member's), its
  weight [1, 1000], and its mode: 0 use its pass, 1 keep its pass for a
  later level, 2 shadow (the terms are shadow keys; never queued).
Reply: for each job {1, wait, held, shadow wait}: passed (held 1: by the
pass it held) or granted, to run after wait µs; {6, ahead, 0, 0}: queued
behind `ahead` jobs; or decide's INVALID and WRONGTYPE tuples; then the
members called, to be woken.
]]

-- The statuses of share's jobs: passed or granted (run at now + wait), or
-- waiting in the list (parked, uncharged).
local SHARED, SHARE_WAIT = 1, 6
local MAX_LOOKAHEAD = 60000000 -- 60 s, µs

-- shareTerms checks n terms from ARGV position x and returns decide's
-- limit arguments for them, or nil, an E_* code and its position.
local function shareTerms(args, x, n)
  local out = {}
  for z = 0, n - 1 do
    local y = x + 3 * z
    local r, code, at = term(args, y, whole)
    if r == nil then return nil, code, at end
    out[#out + 1], out[#out + 2], out[#out + 3] = args[y], args[y + 1], args[y + 2]
  end
  return out
end

-- shareRead reads a key of the level's own with a command: false when
-- it holds another type, else true and the reply.
local function shareRead(...)
  local v = pcallr(...)
  if type(v) == 'table' and v.err then
    if isWrongType(v) then return false end
    error(v.err)
  end
  return true, v
end

-- grant decides one job of cost c on the level's terms, reserving within
-- horizon µs: its wait (0: now) when granted and charged, false when its
-- slot lies past the horizon (nothing charged), or nil and decide's tuple
-- when it is invalid.
local function grant(TK, TA, c, horizon, t)
  local da = {format('%d', t), format('%d', horizon), format('%d', c), '0', '1', format('%d', #TA / 3)}
  for i = 1, #TA do da[6 + i] = TA[i] end
  local r = decide(TK, da)
  if r.err then return nil, {INVALID, 0, 0, 0} end
  if r[1] == ADMITTED then return 0 end
  if r[1] == LIMITED then
    if r[4] % 2 == 1 then return r[2] end
    return false
  end
  return nil, {r[1], r[2], r[3], r[4]}
end

local function share(keys, args)
  if not call then bind() end
  local na, nk = #args, #keys
  if na < 5 then return badcall('share takes at least 5 arguments') end
  local n = whole(args[5], 0, MAX_LIMITS)
  if n == nil then return {INVALID, E_RATE, 5, 0} end
  local first = 6 + 3 * n
  local M = (na - first + 1) / 5
  if M % 1 ~= 0 or M < 0 or M > MAX_JOBS or nk ~= 5 + n then
    return badcall('share takes 5 keys and 1 per term, 5 + 3 per term arguments and 5 per job')
  end
  local now = whole(args[1], 0, EXACT - 1)
  if now == nil then return {INVALID, E_NOW, 1, 0} end
  local noCalls = args[2] == 'n'
  local callAhead = 0
  if not noCalls then callAhead = whole(args[2], 0, MAX_LOOKAHEAD) end
  if callAhead == nil then return {INVALID, E_HORIZON, 2, 0} end
  local direct = whole(args[3], callAhead, MAX_LOOKAHEAD)
  if direct == nil then return {INVALID, E_HORIZON, 3, 0} end
  local ttl = whole(args[4], 1, MAX_TTL_MS)
  if ttl == nil then return {INVALID, E_TTL, 4, 0} end
  local TA, code, at = shareTerms(args, 6, n)
  if TA == nil then return {INVALID, code, at, 0} end
  local J = {}
  for j = 0, M - 1 do
    local x = first + 5 * j
    local member, flow = args[x], args[x + 1]
    local c = whole(member and match(member, '^(%d+)/[^/]+/.') or nil, 1, MAX_N)
    if c == nil or not validMember(member) then return {INVALID, E_MEMBER, x, 0} end
    if not validMember(flow) then return {INVALID, E_MEMBER, x + 1, 0} end
    if whole(args[x + 2], 1, MAX_N) ~= c then return {INVALID, E_COST, x + 2, 0} end
    local w = whole(args[x + 3], 1, 1000)
    if w == nil then return {INVALID, E_COST, x + 3, 0} end
    local mode = args[x + 4]
    if mode ~= '0' and mode ~= '1' and mode ~= '2' then return {INVALID, E_FRESH, x + 4, 0} end
    J[j + 1] = {member, flow, c, w, mode}
  end
  local W, V, P, X, I = keys[1], keys[2], keys[3], keys[4], keys[nk]
  local TK = {unpk(keys, 5, nk - 1)}
  TK[n + 1] = X
  -- Every stored value the call reads, checked before the first write.
  if not shareRead('ZCARD', W) then return {WRONGTYPE, 1, 0, 0} end
  local ok, vv = shareRead('HGET', V, '')
  if not ok then return {WRONGTYPE, 2, 0, 0} end
  if not shareRead('ZCARD', P) then return {WRONGTYPE, 3, 0, 0} end
  local okI, nI = shareRead('ZCARD', I)
  if not okI then return {WRONGTYPE, nk, 0, 0} end
  -- Whether the groups' order holds a job: a level without any (a
  -- group's, or the global one without groups) never looks a job up in
  -- it.
  local inner = nI > 0
  local t = clock(now)
  -- And the terms' buckets, which every job and the call step read.
  for k = 1, n do
    local refused = termCheck(keys, 4 + k, args, 3 + 3 * k, 0, t)
    if refused then return refused end
  end
  local ttlUs = ttl * 1000
  call('ZREMRANGEBYSCORE', P, '-inf', format('(%d', t - ttlUs))
  local Vn = tonum(vv or 0) or 0
  local reply = {}
  for j = 1, M do
    local member, flow, c, w, mode = unpk(J[j])
    local o = 4 * (j - 1)
    reply[o + 1], reply[o + 2], reply[o + 3], reply[o + 4] = SHARED, 0, 0, 0
    if n == 0 or mode == '2' then
      -- No limit, or one in shadow mode: the level holds no job back;
      -- one queued before leaves the list.
      call('ZREM', W, member)
      call('ZREM', P, member)
      if inner then innerDrop(I, V, member) end
    end
    if n == 0 then
      reply[o + 2] = 0
    elseif mode == '2' then
      -- Shadow: decided on the shadow buckets alone, never waiting, and
      -- charged whatever the wait, which is what the level would have
      -- held the job for in all (ahead of it, every job charged).
      local da = {format('%d', t), format('%d', MAX_HORIZON), format('%d', c), '0', '3', format('%d', n)}
      for i = 1, #TA do da[6 + i] = TA[i] end
      local TS = {unpk(keys, 5, nk - 1)}
      local r = decide(TS, da)
      if r.err then return r end
      reply[o + 1], reply[o + 2], reply[o + 3], reply[o + 4] = r[1], r[2], r[3], r[4]
      if r[1] == ADMITTED then reply[o + 1], reply[o + 2], reply[o + 3], reply[o + 4] = SHARED, 0, 0, r[2] end
    else
      local s = call('ZSCORE', P, member)
      if s then
        -- It holds a pass: granted or called before.
        local wait = tonum(s) - t
        if wait < 0 then wait = 0 end
        if wait == 0 and mode == '0' then call('ZREM', P, member) end
        reply[o + 2], reply[o + 3] = wait, 1
      else
        local rank = call('ZRANK', W, member)
        local ten = match(member, '^%d+/([^/]+)/')
        local grouped = flow ~= ten
        -- at: where a job that joins the list stands in it; its place, or
        -- just before V for a flow with nothing placed past V (below).
        local place, ahead, at
        if rank then
          place, ahead = tonum(call('ZSCORE', W, member)), rank
          -- At its group's turn, a job of a group passes only as its
          -- group's next (GROUPS AT THE GLOBAL LEVEL); else the call
          -- step calls that one.
          if ahead == 0 and grouped and inner and innerFind(I, member) and innerHead(I, flow) ~= member then ahead = 1 end
        else
          local f = tonum(call('HGET', V, flow) or 0) or 0
          -- A group's flow is of weight 1; its tenants' weights count
          -- within it.
          local fw = w
          if grouped then fw = 1 end
          -- A flow with nothing placed past V asks for less than its
          -- share: its job goes ahead of the jobs placed from V on (the
          -- other flows' next turns, which its own place would tie with),
          -- behind only those placed before V, and passes at once when
          -- none is (start-time fair queuing); when the terms have no
          -- slot for it within the direct lookahead, it waits in the
          -- list at V, called next. Its place counts from V.
          local idle = f < Vn
          if idle then f = Vn end
          place = f + c / fw
          at = place
          -- Just before V: ahead of the jobs placed at V too (another
          -- flow's turn that tied with the one called last).
          if idle then
            local e = Vn * 2 ^ -50
            if e < 2 ^ -40 then e = 2 ^ -40 end
            at = Vn - e
          end
          ahead = call('ZCOUNT', W, '-inf', '(' .. format('%.17g', at))
        end
        local placed = function(queued)
          call('HSET', V, flow, format('%.17g', place))
          if grouped then
            innerPlaced(I, V, flow, ten, member, c, w, queued)
            inner = inner or queued
          end
        end
        local wait, bad = false, nil
        if ahead == 0 then wait, bad = grant(TK, TA, c, direct, t) end
        if bad then
          reply[o + 1], reply[o + 2], reply[o + 3], reply[o + 4] = unpk(bad)
        elseif wait then
          if rank then
            call('ZREM', W, member)
            if inner then innerDrop(I, V, member) end
          end
          if place > Vn then Vn = place end
          if not rank then placed(false) end
          if wait > 0 or mode == '1' then call('ZADD', P, format('%d', t + wait), member) end
          reply[o + 2] = wait
        else
          if not rank then
            call('ZADD', W, format('%.17g', at), member)
            placed(true)
          end
          reply[o + 1], reply[o + 2] = SHARE_WAIT, ahead
        end
      end
    end
  end
  -- The call step: the head of the list, while the terms give it a slot
  -- within the call lookahead. A level without limits, or in shadow mode
  -- (the caller then names no term), hands every job queued back, to be
  -- woken: none of them waits for a turn any more.
  local called = {}
  local enforced = n > 0 and not (M > 0 and J[1][5] == '2')
  for _ = 1, noCalls and 0 or MAX_CALLS do
    local head = call('ZRANGE', W, 0, 0, 'WITHSCORES')
    if not head[1] then break end
    -- The head's turn is its group's, when it has one: the group's next
    -- job in its own order takes it (GROUPS AT THE GLOBAL LEVEL).
    local m, q = head[1], nil
    local g = inner and innerFind(I, m)
    if g and enforced then
      local y = innerHead(I, g)
      q = y and y ~= m and call('ZSCORE', W, y)
      if q then
        m = y
      elseif y and y ~= m then
        innerDrop(I, V, y) -- no longer listed: the head's own turn
      end
    end
    local wait, bad = 0, nil
    if enforced then
      local c = tonum(match(m, '^(%d+)/')) or 1
      wait, bad = grant(TK, TA, c, callAhead, t)
      if wait == false then break end
    end
    if q then call('ZADD', W, q, head[1]) end
    call('ZREM', W, m)
    if g then innerDrop(I, V, m) end
    if enforced and not bad then
      call('ZADD', P, format('%d', t + wait), m)
      local pl = tonum(head[2])
      if pl > Vn then Vn = pl end
    end
    -- An invalid head (its cost past a lowered burst) is woken too: back,
    -- it is decided again, and refused for the worker to dead-letter.
    called[#called + 1] = m
  end
  call('DEL', X)
  call('HSET', V, '', format('%.17g', Vn))
  call('PEXPIRE', W, ttl)
  call('PEXPIRE', V, ttl)
  call('PEXPIRE', P, ttl)
  call('PEXPIRE', I, ttl)
  for i = 1, #called do reply[4 * M + i] = called[i] end
  return reply
end

-- unplace moves flow field fk of the fair hash V back by step, and
-- forgets it when that leaves it behind base, the place called last.
local function unplace(V, fk, step, base)
  local f = tonum(call('HGET', V, fk) or 0)
  if not f then return end
  f = f - step
  if f < base then
    call('HDEL', V, fk)
  else
    call('HSET', V, fk, format('%.17g', f))
  end
end

-- unplaceJob moves back the fair places a job of tenant ten, cost c and
-- weight w took in flow: its tenant's, or, when the flow is its group's
-- (GROUPS AT THE GLOBAL LEVEL), its group's, of weight 1, and its place
-- in the group's own order.
local function unplaceJob(V, flow, ten, c, w, Vn)
  if ten and ten ~= flow then
    unplace(V, flow, c, Vn)
    unplace(V, flow .. '/' .. ten, c / w, tonum(call('HGET', V, '#' .. flow) or 0) or 0)
  else
    unplace(V, flow, c / w, Vn)
  end
end

--[[
unshare___VERSION__: give back what share granted jobs that then did not
run (a later level or the tenant's own limits made them wait), or forget
the passes kept for jobs that ran.

KEYS: [1] fair-queue hash, [2] pass set, [3] scratch, [4..] term keys
ARGV: [1] now (0 = Redis TIME), [2] n terms, 3n term arguments, then per
job: member, flow, cost, weight, the slot it was granted (µs), and 1 to
give back its charge, 2 to give it back only if its pass is still unused
(a called job that could not be woken: one that ran used it), or 0 to
forget its pass only.
Reply: the number of jobs given back.
]]
local function unshare(keys, args)
  if not call then bind() end
  local na, nk = #args, #keys
  local n = whole(args[2], 0, MAX_LIMITS)
  if n == nil or nk ~= 3 + n then return badcall('unshare takes 3 keys and 1 per term') end
  local first = 3 + 3 * n
  local M = (na - first + 1) / 6
  if M % 1 ~= 0 or M < 0 or M > MAX_JOBS then return badcall('unshare takes 2 + 3 per term arguments and 6 per job') end
  local now = whole(args[1], 0, EXACT - 1)
  if now == nil then return {INVALID, E_NOW, 1, 0} end
  local TA, code, at = shareTerms(args, 3, n)
  if TA == nil then return {INVALID, code, at, 0} end
  for j = 0, M - 1 do
    local x = first + 6 * j
    if not validMember(args[x]) or not validMember(args[x + 1]) then return {INVALID, E_MEMBER, x, 0} end
    if whole(args[x + 2], 1, MAX_N) == nil then return {INVALID, E_COST, x + 2, 0} end
    if whole(args[x + 3], 1, 1000) == nil then return {INVALID, E_COST, x + 3, 0} end
    if whole(args[x + 4], 0, EXACT - 1) == nil then return {INVALID, E_NOW, x + 4, 0} end
    local how = args[x + 5]
    if how ~= '0' and how ~= '1' and how ~= '2' then return {INVALID, E_FRESH, x + 5, 0} end
  end
  local V, P, X = keys[1], keys[2], keys[3]
  local ok, vv = shareRead('HGET', V, '')
  if not ok then return {WRONGTYPE, 1, 0, 0} end
  if not shareRead('ZCARD', P) then return {WRONGTYPE, 2, 0, 0} end
  local t = clock(now)
  for k = 1, n do
    local refused = termCheck(keys, 3 + k, args, 3 * k, 0, t)
    if refused then return refused end
  end
  local Vn = tonum(vv or 0) or 0
  local SK = {X, unpk(keys, 4, nk)}
  local given = 0
  for j = 0, M - 1 do
    local x = first + 6 * j
    local member, flow, c, w = args[x], args[x + 1], args[x + 2] + 0, args[x + 3] + 0
    local unused = call('ZREM', P, member) == 1
    if n > 0 and (args[x + 5] == '1' or (args[x + 5] == '2' and unused)) then
      call('DEL', X)
      local sa = {format('%d', t), '1000', '2', format('%d', c), args[x + 4], '0', '0'}
      for i = 1, #TA do sa[7 + i] = TA[i] end
      local r = settle(SK, sa)
      if not r.err and r[1] == 1 then given = given + 1 end
      unplaceJob(V, flow, match(member, '^%d+/([^/]+)/'), c, w, Vn)
    end
  end
  call('DEL', X)
  return given
end
