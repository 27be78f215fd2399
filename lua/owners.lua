-- owners.lua: a job's owner record outside a decision (claim, release)
-- and its handler failures (failed).

-- owner reads the owner record of a job, KEYS[at], outside a decision:
-- the incarnation it names (false for none), or nil and the reply that
-- refuses the call.
local function owner(keys, at)
  local name = keys[at]
  local v = get(name)
  if v == nil then return nil, {WRONGTYPE, at, 0, 0} end
  local own, code = stored(v, name, E_OWNER, E_OWNER_TTL)
  if own == nil then return nil, {INVALID, code, at, 0} end
  return own
end

--[[
claim___VERSION__: make an incarnation the owner of a job (see decide,
OWNER) if no incarnation owns it. The worker's fast lane claims a job this
way before it copies the job out of a backlog.

KEYS[1]  the job's owner key
ARGV[1]  the incarnation, [0, 2^53)
ARGV[2]  the record's TTL in ms, [1, 31 days]

Reply:
  {1, claimed, owner, 0}  claimed is 1 when the record was written, else 0;
                          owner is the incarnation it names after the call
  {3, code, position, 0}  INVALID (E_INCARNATION, E_TTL, E_OWNER,
                          E_OWNER_TTL); nothing written
  {5, 1, 0, 0}            WRONGTYPE: KEYS[1] holds another type
]]
local function claim(keys, args)
  if not call then bind() end
  if #keys ~= 1 or #args ~= 2 then return badcall('claim takes 1 key and 2 arguments') end
  local inc = whole(args[1], 0, EXACT - 1)
  if inc == nil then return {INVALID, E_INCARNATION, 1, 0} end
  local ttl = whole(args[2], 1, 31 * 86400000)
  if ttl == nil then return {INVALID, E_TTL, 2, 0} end
  local own, refused = owner(keys, 1)
  if own == nil then return refused end
  if own then return {1, 0, own, 0} end
  call('SET', keys[1], format('%d', inc), 'PX', args[2])
  return {1, 1, inc, 0}
end

--[[
release___VERSION__: give up a job's owner record if it names an
incarnation (compare and delete).

KEYS[1]  the job's owner key
ARGV[1]  the incarnation, [0, 2^53)

Reply:
  {1, released, owner, 0}  released is 1 when the record was deleted, else
                           0; owner is the incarnation the record names
                           after the call, -1 for none
  {3, code, position, 0}   INVALID (E_INCARNATION, E_OWNER, E_OWNER_TTL);
                           nothing written
  {5, 1, 0, 0}             WRONGTYPE: KEYS[1] holds another type
]]
local function release(keys, args)
  if not call then bind() end
  if #keys ~= 1 or #args ~= 1 then return badcall('release takes 1 key and 1 argument') end
  local inc = whole(args[1], 0, EXACT - 1)
  if inc == nil then return {INVALID, E_INCARNATION, 1, 0} end
  local own, refused = owner(keys, 1)
  if own == nil then return refused end
  if own ~= inc then return {1, 0, own or -1, 0} end
  call('DEL', keys[1])
  return {1, 1, -1, 0}
end

--[[
failed___VERSION__: count one more handler failure of a job, atomically with
the counter's TTL (INCR then PEXPIRE as two client commands could leave a
counter that never expires), and, with an owner key, give up the job's owner
record.

KEYS[1]  the job's failure counter
KEYS[2]  optional: the job's owner key
ARGV[1]  the counter's TTL in ms, [1, 30 days]
ARGV[2]  with KEYS[2]: the incarnation that failed, [0, 2^53)
ARGV[3]  with KEYS[2]: the count at which the job is given up, [1, 1e6]

With KEYS[2], while the count stays below ARGV[3] the owner record is
deleted if it names the incarnation that failed: it did not run to success,
so the next incarnation (a moved copy, say) must be free to run. At ARGV[3]
the record is kept: the job is given up, and no other incarnation may run it.

Reply:
  {1, count, released, 0}  the failures counted so far, this one included;
                           released is 1 when the owner record was deleted
  {3, code, position, 0}   INVALID (E_TTL, E_INCARNATION, E_GIVE_UP,
                           E_FAILURES, E_OWNER, E_OWNER_TTL); nothing
                           written
  {5, position, 0, 0}      WRONGTYPE: KEYS[position] holds another type
]]
local function failed(keys, args)
  if not call then bind() end
  local nk = #keys
  if nk < 1 or nk > 2 or #args ~= 2 * nk - 1 then return badcall('failed takes 1 key and 1 argument, or 2 and 3') end
  local ttl = whole(args[1], 1, MAX_HORIZON)
  if ttl == nil then return {INVALID, E_TTL, 1, 0} end
  local inc, giveUpAt
  if nk == 2 then
    inc = whole(args[2], 0, EXACT - 1)
    if inc == nil then return {INVALID, E_INCARNATION, 2, 0} end
    giveUpAt = whole(args[3], 1, 1000000)
    if giveUpAt == nil then return {INVALID, E_GIVE_UP, 3, 0} end
  end
  -- Every read before the first write.
  local v = get(keys[1])
  if v == nil then return {WRONGTYPE, 1, 0, 0} end
  if v and (#v > 15 or not find(v, '^%d+$')) then return {INVALID, E_FAILURES, 1, 0} end
  local own = false
  if nk == 2 then
    local refused
    own, refused = owner(keys, 2)
    if own == nil then return refused end
  end
  local n = call('INCR', keys[1])
  call('PEXPIRE', keys[1], args[1])
  local released = 0
  if own and own == inc and n < giveUpAt then
    call('DEL', keys[2])
    released = 1
  end
  return {1, n, released, 0}
end
