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
            or a sliding window (burst 'w'): N, span, 'w'; KEYS are then
            the windows of the old and new span

If the new bucket exists (a worker carried it already, or decided under the
new limit) nothing is done. Otherwise the new bucket gets the whole tokens
the old one holds now, at most the new burst: a bucket in debt holds none
(its slots' jobs are decided again: regime). A full result is the same as
none, and is not written. The old bucket is deleted. A window's
admissions are carried whole (renamed), to count for the new span, and
its TTL is lengthened by how much longer the new span is.

Dropped: KEYS[1] alone, a bucket of a limit the tenant's limits no
longer name (DROPPED); ARGV[1] now, ARGV[2..4] that limit's rate, period
and burst. A bucket in debt is forgiven: empty at now, its epoch
advanced (EPOCH), so that the slots reserved on it are void and the
limit, should it come back, does not charge again for the jobs those
slots' holders were decided anew for. Its TTL is kept: the epoch
outlives every slot. Any other is left to expire. Reply {1, forgave, 0,
0}, or INVALID and WRONGTYPE as above.

Reply:
  {1, carried, tokens, 0}  carried is 1 when the new bucket was written or
                           the old one held nothing to carry, else 0;
                           tokens is what the new bucket holds
  {3, code, position, 0}   INVALID (an argument, or E_STATE/E_STATE_TTL of
                           KEYS[1]); nothing written
  {5, position, 0, 0}      WRONGTYPE
]]
-- carryWindow carries the window KEYS[1] of span p0 over to KEYS[2], of
-- N n and span p (WINDOWS, window.lua), unless KEYS[2] exists.
local function carryWindow(keys, n, p0, p, now)
  local to = pcallr('ZCARD', keys[2])
  if type(to) == 'table' then
    isWrongType(to)
    return {WRONGTYPE, 2, 0, 0}
  end
  if to > 0 then return {1, 0, 0, 0} end
  local w = {name = keys[1], p = p}
  local st = windowRead(w, now)
  if st == WRONGTYPE then return {WRONGTYPE, 1, 0, 0} end
  if st ~= 1 then return {INVALID, st, 1, 0} end
  if w.top == 0 then return {1, 1, n, 0} end
  local ttl = call('PTTL', keys[1])
  call('RENAME', keys[1], keys[2])
  if p > p0 then call('PEXPIRE', keys[2], format('%d', ttl + ceil((p - p0) / 1000))) end
  local left = n - (w.top - w.live + 1)
  if left < 0 then left = 0 end
  return {1, 1, left, 0}
end

-- carryDropped forgives the debt of a dropped limit's bucket (Dropped,
-- above).
local function carryDropped(keys, args)
  local now = whole(args[1], 0, EXACT - 1)
  if now == nil then return {INVALID, E_NOW, 1, 0} end
  local r, code, at = limit(args, 2, whole)
  if r == nil then return {INVALID, code, at, 0} end
  now = clock(now)
  local v = get(keys[1])
  if v == nil then return {WRONGTYPE, 1, 0, 0} end
  if not v then return {1, 0, 0, 0} end
  local a, f, _, e = readState(v)
  if a == nil then return {INVALID, E_STATE, 1, 0} end
  local ttl = call('PTTL', keys[1])
  if ttl < 0 then return {INVALID, E_STATE_TTL, 1, 0} end
  if a < now or (a == now and f == 0) then return {1, 0, 0, 0} end
  call('SET', keys[1], spack(STATE_E, now, 0, r, nextEpoch(e)), 'PX', format('%d', ttl))
  return {1, 1, 0, 0}
end

local function carry(keys, args)
  if not call then bind() end
  if #keys == 1 and #args == 4 then return carryDropped(keys, args) end
  if #keys ~= 2 or #args ~= 5 then return badcall('carry takes 2 keys and 5 arguments, or 1 key and 4') end
  local now = whole(args[1], 0, EXACT - 1)
  if now == nil then return {INVALID, E_NOW, 1, 0} end
  local p0 = whole(args[2], 1000, MAX_PERIOD)
  if p0 == nil then return {INVALID, E_PERIOD, 2, 0} end
  local r, p, b, q, m, fill = term(args, 3, whole)
  if r == nil then return {INVALID, p, b, 0} end
  now = clock(now)
  if q < 0 then return carryWindow(keys, r, p0, p, now) end
  local to = get(keys[2])
  if to == nil then return {WRONGTYPE, 2, 0, 0} end
  if to then return {1, 0, 0, 0} end
  local v = get(keys[1])
  if v == nil then return {WRONGTYPE, 1, 0, 0} end
  if not v then return {1, 1, b, 0} end
  -- Its epoch goes with it: a new period is a new bucket.
  local a, f, r0 = readState(v)
  if a == nil then return {INVALID, E_STATE, 1, 0} end
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
