--[[
admit___VERSION__: decide one job under a running cap.

KEYS[1]     the cap's lease set
KEYS[2]     the cap's waiting list
KEYS[3]     the cap's places hash: the places of the jobs called
KEYS[4..]   the job's keys for decide: its buckets, reservation and owner,
            and optionally its tenant's shift key (SHIFT, head.lua; with
            no limits: its reservation and owner); for the fleet's
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
    if n == nil or na ~= 13 + 3 * n or (nk ~= CAPKEYS + 2 + n and nk ~= CAPKEYS + 3 + n) then
      return badcall('admit takes 5 or 6 keys and 13 arguments, and one key and 3 arguments per limit')
    end
    if whole(args[9], 0, MAX_HORIZON) == nil then return {INVALID, E_HORIZON, 9, 0} end
    if whole(args[10], 1, MAX_N) == nil then return {INVALID, E_COST, 10, 0} end
    inc = whole(args[11], 0, EXACT - 1)
    if inc == nil then return {INVALID, E_INCARNATION, 11, 0} end
    local fl = FLAGS[args[12]]
    if fl == nil then return {INVALID, E_FRESH, 12, 0} end
    fresh = fl % 2 == 1
    for x = 14, na, 3 do
      local r, code, at = term(args, x, whole)
      if r == nil then return {INVALID, code, at, 0} end
    end
    rated, ownerAt = n > 0, CAPKEYS + n + 2
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
