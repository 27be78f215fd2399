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
KEYS[n+1], KEYS[n+2]  optional: the reservation key of the job told to
            wait, and its tenant's shift key (SHIFT, head.lua)
ARGV[1]     now: µs since the Unix epoch, [0, 2^53); 0 = Redis TIME
ARGV[2]     until: µs since the Unix epoch, at most now + 30 days
ARGV[3..]   each bucket's limit: rate, period, burst (as decide reads
            them), three per key, so that an absent state can be written

A bucket is written in its limit's rate units (a state of another rate is
rebased first, as decide does), with the TTL of a state that is full again
at its empty time plus its fill time. An `until` not after now does nothing.

The job told to wait, when named, is given the slot at `until`, reserved
under these limits and recording the tenant's shift: decided again, it
is admitted from `until` without a second charge, ahead of the jobs that
arrived during the hold (their slots start one token after `until`, which
no bucket gives). It was charged when it was first admitted. The
reservation lives until `until` plus the longest fill time; the shift key,
when set, at least as long.

Reply:
  {1, held, 0, 0}          held: the buckets whose empty time moved
  {3, code, position, 0}   INVALID (E_NOW, E_HORIZON for until, a limit's
                           E_RATE/E_PERIOD/E_BURST, E_STATE/E_STATE_TTL of
                           a key, E_SHIFT/E_SHIFT_TTL of the shift key);
                           nothing written
  {5, position, 0, 0}      WRONGTYPE: KEYS[position] holds another type;
                           nothing written
]]
local function hold(keys, args)
  if not call then bind() end
  local n = (#args - 2) / 3
  if n < 1 or n > MAX_LIMITS or n ~= floor(n) or (#keys ~= n and #keys ~= n + 2) then
    return badcall('hold takes 1 to 8 bucket keys, 2 + 3 per bucket arguments, and optionally a job\'s 2 keys')
  end
  local now = whole(args[1], 0, EXACT - 1)
  if now == nil then return {INVALID, E_NOW, 1, 0} end
  local untilAt = whole(args[2], 0, EXACT - 1)
  if untilAt == nil then return {INVALID, E_HORIZON, 2, 0} end
  -- L: each limit, as decide reads it; LI: the same in decide's layout
  -- (jobs.lua), for the regime id of the job's slot.
  local L, LI, longest = {}, {}, 0
  for k = 1, n do
    local r, p, b, q, m, fill = limit(args, 3 * k, whole)
    if r == nil then return {INVALID, p, b, 0} end
    L[k] = {r, p, b, q, m, fill}
    LI[7 * k - 6], LI[7 * k - 5], LI[7 * k - 3] = r, p, q
    if fill > longest then longest = fill end
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
    local a, f, rebased, e = state(v, keys[k], r, p, b, fill, now)
    if a == nil then return {INVALID, f, k, 0} end
    W[k] = {a, f, rebased, e}
  end
  local sh = 0
  if #keys > n then
    if get(keys[n + 1]) == nil then return {WRONGTYPE, n + 1, 0, 0} end
    local code
    sh, code = shiftRead(keys[n + 2])
    if sh == nil then
      if code == WRONGTYPE then return {WRONGTYPE, n + 2, 0, 0} end
      return {INVALID, code, n + 2, 0}
    end
  end
  local held, epochs = 0, 0
  for k = 1, n do
    local r, _, _, q, m = unpk(L[k])
    local a, f, rebased, e = unpk(W[k])
    if a < untilAt then
      a, f, rebased = untilAt, 0, true
      held = held + 1
    end
    if rebased then
      call('SET', keys[k], stateValue(a, f, r, e), 'PX', format('%d', fullIn(a, f, r, q, m, now)))
    end
    epochs = epochs + e
  end
  if #keys > n then
    local ttl = format('%d', ceil((untilAt - now + longest) / 1000))
    call('SET', keys[n + 1], resvValue(untilAt, regimeE(regime(LI, 0, n), epochs), sh), 'PX', ttl)
    if sh > 0 then call('PEXPIRE', keys[n + 2], ttl, 'GT') end
  end
  return {1, held, 0, 0}
end
