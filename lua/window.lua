-- window.lua: the sliding windows of decide's general path (decide.lua)
-- and of admit's checks (caps.lua): reading a window, the wait it sets a
-- job, and the admissions a call adds.

--[[
WINDOWS: a sliding window (sliding:N/DURATION) admits at most N cost units
in any span of its DURATION D, exactly. It is a limit in ARGV whose burst
is 'w' (term, head.lua): rate N in [1, MAX_WINDOW], period D. Its key is a
sorted set of the admissions it counted, in order, one member each
('<slot µs>:<first unit>'), scored by the number of units admitted up to
and including it: the units are numbered from 1, an admission of cost c
after u units takes units u + 1 to u + c. Every member is its own, whatever
the worker, call or microsecond: no two admissions collapse into one. A
unit counts from its admission's slot until slot + D. A job of cost c,
with the units' slots t_1 <= ... <= t_m (those of earlier jobs of the call
included), may have its slot at s when s >= t_m (in order: a job never
passes a slot reserved before it) and fewer than N - c + 1 units lie
after s - D: s >= t_(m-N+c) + D when m + c > N, unit m - N + c found by
its number (ZRANGEBYSCORE, one read whatever the set holds). Its wait is
that of the longest of its limits and windows; when it is charged, it is
added at its slot to every window (a later slot only sees fewer units in
its span, so that slot is as good for every window). Admissions that left
the span are dropped, at most MAX_WINDOW a call, by the calls that add
some; the set lives until its last admission leaves the span. N names no
key (the set is named by D): a changed N keeps the admissions that count,
and grants nothing. The general path decides every call with a window;
the fast paths leave it (their checks refuse a burst that is not digits).
]]

-- windowAt reads the admission at rank r of window w: its slot and first
-- unit, and its last unit (the score); nil when there is none, false when
-- it is malformed.
local function windowAt(w, r)
  local v = call('ZRANGE', w.name, r, r, 'WITHSCORES')
  if not v[1] then return nil end
  local t, u = match(v[1], '^(%d+):(%d+)$')
  local e = tonum(v[2])
  if not t or not e then return false end
  return tonum(t), tonum(u), e
end

-- windowRead reads window w (named w.name) at now, once per call: the
-- units admitted (top: the last unit's number, 0 when empty), the slot of
-- the last admission (last, or -1), the admissions that left the span
-- (old: they lead the set) and the number of the first unit that counts
-- (live). It returns 1, or WRONGTYPE, or an E_* code.
local function windowRead(w, now)
  local name = w.name
  local card = pcallr('ZCARD', name)
  if type(card) == 'table' then
    isWrongType(card)
    return WRONGTYPE
  end
  w.top, w.last, w.old, w.live = 0, -1, 0, 1
  if card == 0 then return 1 end
  if call('PTTL', name) < 0 then return E_STATE_TTL end
  local t, u, e = windowAt(w, -1)
  if not t or t > now + MAX_HORIZON + w.p or e >= EXACT then return E_STATE end
  w.top, w.last, w.live = e, t, e + 1
  -- The admissions that left the span lead the set: find how many, by
  -- doubling then halving (a few reads, however many there are).
  local from = now - w.p
  local lo, hi = 0, card -- the first admission that counts lies in [lo, hi]
  local step = 1
  while lo < hi do
    local r = lo + step - 1
    if r >= hi then r = hi - 1 end
    t, u = windowAt(w, r)
    if not t then return E_STATE end
    if t > from then
      hi = r
      w.live = u
      break
    end
    lo, step = r + 1, step * 2
  end
  while lo < hi do
    local r = floor((lo + hi) / 2)
    t, u = windowAt(w, r)
    if not t then return E_STATE end
    if t > from then hi, w.live = r, u else lo = r + 1 end
  end
  w.old = lo
  return 1
end

-- windowWait is the wait window w sets a job of cost c under its N at
-- now: until its last admission, and until unit N - c + 1 from the last
-- (counting the units added in this call, the last) leaves the span.
local function windowWait(w, n, c, now)
  local A = w.A
  local i = #A
  local last = w.last
  if i > 0 then last = A[i - 1] end
  local wait = last - now
  local k = n - c + 1
  local t = nil
  while i > 0 do
    if k <= A[i] then
      t = A[i - 1]
      break
    end
    k, i = k - A[i], i - 2
  end
  local x = w.top - k + 1 -- the stored unit's number
  if not t and x >= w.live then
    local v = call('ZRANGEBYSCORE', w.name, format('%d', x), '+inf', 'LIMIT', 0, 1)
    t = v[1] and tonum(match(v[1], '^(%d+):'))
  end
  if t and t + w.p - now > wait then wait = t + w.p - now end
  return wait
end

-- windowWrite adds the admissions of the call to window w, drops at most
-- MAX_WINDOW that left the span, and sets its TTL: until its last
-- admission leaves the span, and no less than the horizon plus D.
local function windowWrite(w, now, horizon)
  local name, A, u = w.name, w.A, w.top
  if w.old > 0 then
    local drop = w.old
    if drop > MAX_WINDOW then drop = MAX_WINDOW end
    call('ZREMRANGEBYRANK', name, 0, drop - 1)
  end
  local Z, nz = {}, 0
  for i = 1, #A, 2 do
    Z[nz + 1], Z[nz + 2] = format('%d', u + A[i + 1]), format('%d:%d', A[i], u + 1)
    u, nz = u + A[i + 1], nz + 2
  end
  call('ZADD', name, unpk(Z, 1, nz))
  local last = A[#A - 1] - now
  if last < horizon then last = horizon end
  call('PEXPIRE', name, format('%d', ceil((last + w.p) / 1000)))
end
