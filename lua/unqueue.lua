-- unqueue.lua: taking purged jobs out of a level's waiting list (SHARED
-- LEVELS, share.lua).

--[[
unqueue___VERSION__: take jobs that will never come back (an operator
purged their parked messages) out of a level's waiting list, and their
flows' fair places back by what they took, as unshare does for a grant:
their places would otherwise be called in turn, each taking the level's
room until its waker, finding no message, hands it on.

KEYS: [1] waiting list, [2] fair-queue hash, [3] groups' order
ARGV: per job (at most MAX_JOBS): its member and its tenant's weight
[1, 1000]. A job's flow is its tenant, or its group when the groups'
order holds it (GROUPS AT THE GLOBAL LEVEL).
Reply: the number of jobs taken out; a job not in the list is no error.
]]
local function unqueue(keys, args)
  if not call then bind() end
  local na = #args
  if #keys ~= 3 or na % 2 ~= 0 or na / 2 > MAX_JOBS then
    return badcall('unqueue takes 3 keys and at most MAX_JOBS pairs of member and weight')
  end
  for x = 1, na, 2 do
    if not validMember(args[x]) or not match(args[x], '^%d+/[^/]+/') then return {INVALID, E_MEMBER, x, 0} end
    if whole(args[x + 1], 1, 1000) == nil then return {INVALID, E_COST, x + 1, 0} end
  end
  local W, V, I = keys[1], keys[2], keys[3]
  if not shareRead('ZCARD', W) then return {WRONGTYPE, 1, 0, 0} end
  local ok, vv = shareRead('HGET', V, '')
  if not ok then return {WRONGTYPE, 2, 0, 0} end
  local okI, nI = shareRead('ZCARD', I)
  if not okI then return {WRONGTYPE, 3, 0, 0} end
  local Vn = tonum(vv or 0) or 0
  local n = 0
  for x = 1, na, 2 do
    local m, w = args[x], args[x + 1] + 0
    if call('ZREM', W, m) == 1 then
      n = n + 1
      local c, ten = match(m, '^(%d+)/([^/]+)/')
      c = tonum(c)
      local g, ps, e = nil, nil, nil
      if nI > 0 then g, ps, e = innerFind(I, m) end
      if g then
        -- Out of its group's order without moving the group on: it was
        -- never called.
        call('ZREM', I, e, g .. ' ' .. ps .. ' ' .. m)
      end
      unplaceJob(V, g or ten, ten, c, w, Vn)
    end
  end
  return n
end
