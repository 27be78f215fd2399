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
