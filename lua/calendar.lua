-- calendar.lua: the calendar windows of decide's general path (decide.lua)
-- and of admit's checks (caps.lua): reading a window's counts, placing a
-- job in the first window with room, and writing what a call added.

--[[
CALENDAR: a calendar window (window:N/UNIT[@ZONE]) admits at most N cost
units in each window of a calendar, whose boundaries the caller computes
(in the window's time zone) and passes in its burst argument: 'c' then
the starts of consecutive windows in µs, comma-separated, increasing, at
most MAX_CALENDAR (the last only ends the window before it). Its rate is
N in [1, MAX_N], its period the unit's nominal length (its fill time: the
TTL of a reservation under it is the horizon plus that). Its key is a hash
of counts by window start ('<start µs>' -> units admitted), named by unit
and zone, not N: a changed N keeps the count of the current window, and
grants nothing. A job of cost c is placed in the first window, from the
one holding its earliest slot, that starts no earlier than the latest
window holding a count (in order: a job never passes one placed before
it) and has room (count + c <= N); its slot is that window's start, or
its earliest slot when inside it. Several calendar windows of a job move
its slot until every one admits it there. A window whose argument starts
with 'C' (window:N/UNIT:dlq) places a job only in the window holding its
earliest slot: one over it fits no window, and waits until that window
ends. A job that fits no window
passed waits, uncharged, until the last window's start. Fields of windows
that ended are dropped by the calls that add some; the hash lives until
the end of the last window that holds a count.
]]

-- calTerm reads the boundaries of a calendar window from its burst
-- argument s ('c' then the starts): a table of them, or nil.
calTerm = function(s)
  local W, n, prev = {}, 0, -1
  for v in string.gmatch(sub(s, 2), '[^,]+') do
    local t = whole(v, 0, EXACT - 1)
    if t == nil or t <= prev or n >= MAX_CALENDAR then return nil end
    n, prev = n + 1, t
    W[n] = t
  end
  if n < 2 then return nil end
  W.dlq = sub(s, 1, 1) == 'C'
  return W
end

-- calRead reads calendar window w (named w.name) at now, once per call:
-- the counts by window start (C), the latest start holding a count
-- (floor), the index of the window holding now (cur) and the TTL left
-- (ttl, ms). It returns 1, or WRONGTYPE, or an E_* code.
local function calRead(w, now)
  local W = w.W
  local cur = nil
  for i = 1, #W - 1 do
    if W[i + 1] > now then
      cur = i
      break
    end
  end
  if cur == nil or W[cur] > now then return E_PERIOD end
  w.cur, w.C, w.add, w.floor, w.ttl = cur, {}, {}, -1, 0
  local v = pcallr('HGETALL', w.name)
  if v.err then
    isWrongType(v)
    return WRONGTYPE
  end
  if #v == 0 then return 1 end
  w.ttl = call('PTTL', w.name)
  if w.ttl < 0 then return E_STATE_TTL end
  for i = 1, #v, 2 do
    local s, n = whole(v[i], 0, EXACT - 1), whole(v[i + 1], 0, MAX_N)
    if s == nil or n == nil or s > now + MAX_HORIZON + MAX_PERIOD then return E_STATE end
    w.C[s] = n
    if n > 0 and s > w.floor then w.floor = s end
  end
  return 1
end

-- calPlace places a job of cost c whose slot is no earlier than at in
-- calendar window w of N: it returns the slot and the window's start, or
-- nil and the last window's start when no window passed has room.
local function calPlace(w, n, c, at)
  local W, C, A = w.W, w.C, w.add
  for i = w.cur, #W - 1 do
    local s = W[i]
    if W[i + 1] > at and s >= w.floor and (C[s] or 0) + (A[s] or 0) + c <= n then
      if s > at then return s, s end
      return at, s
    end
    if W.dlq and W[i + 1] > at then return nil, W[i + 1] end
  end
  return nil, W[#W - 1]
end

-- calCharge adds a job of cost c to calendar window w at the window
-- starting at s.
local function calCharge(w, s, c)
  w.add[s] = (w.add[s] or 0) + c
  if s > w.floor then w.floor = s end
  w.n = w.n + c
end

-- calLeft is what calendar window w of N has left in the window holding
-- now.
local function calLeft(w, n)
  local s = w.W[w.cur]
  local t = n - (w.C[s] or 0) - (w.add[s] or 0)
  if t < 0 then t = 0 end
  return t
end

-- calWrite adds the counts of the call to calendar window w, drops the
-- fields of windows that ended, and sets its TTL: until the end of the
-- last window holding a count, and no less than what it had.
local function calWrite(w, now)
  local W, name = w.W, w.name
  local start = W[w.cur]
  local D, nd = {}, 0
  for s in pairs(w.C) do
    if s < start then
      nd = nd + 1
      D[nd] = format('%d', s)
    end
  end
  if nd > 0 then call('HDEL', name, unpk(D, 1, nd)) end
  local ttl = w.ttl
  for i = w.cur, #W - 1 do
    local a = w.add[W[i]]
    if a then
      call('HINCRBY', name, format('%d', W[i]), a)
      local t = ceil((W[i + 1] - now) / 1000)
      if t > ttl then ttl = t end
    end
  end
  call('PEXPIRE', name, format('%d', ttl))
end

-- calJob places a job of cost c in every calendar window of its limits
-- (LI from lo, L of them; their tables in kb by KEYS position from
-- first), its slot no earlier than now + wait: it returns the wait, the
-- position (from 0) of the window that set it or -1, and the windows'
-- starts by position (nil when some window has no room, and then the
-- wait until the last window's start).
local function calJob(LI, lo, L, kb, first, c, now, wait)
  local at, wz = now + wait, -1
  local S = {}
  for _ = 1, MAX_CALENDAR * L do
    local moved = false
    local l = lo
    for z = 0, L - 1 do
      if LI[l + 4] == -2 then
        local t, s = calPlace(kb[first + z], LI[l + 1], c, at)
        if t == nil then return s - now, z, nil end
        S[z] = s
        if t > at then at, moved, wz = t, true, z end
      end
      l = l + LW
    end
    if not moved then break end
  end
  return at - now, wz, S
end
