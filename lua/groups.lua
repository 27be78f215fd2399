--[[
GROUPS AT THE GLOBAL LEVEL (SHARED LEVELS, share.lua): there a job of a
group takes its group's turn (the flow is the group, of weight 1: its
step is the job's cost), and the group's turn goes to its tenants in
turn, when it comes. The list holds one member per job, each group's at
its group's places. The groups' own order, a second fair queue per
group over its tenants (place max(G, F[group/tenant]) + cost / weight,
G the place in it called last, kept as field '#<group>' of the fair
hash; a tenant with nothing placed past G stands just before G), is
kept in the lex-ordered set I (every score 0), two entries a job:
  '<group> <place> <member>'   the group's order: its first is its next
  '><member> <group> <place>'  the job's own, to find it by member
(no group, tenant or job id holds a space). When the list's head is a
job of a group, the group's next job in its own order is called in its
stead, and the head takes that job's place in the list. A group of
three tenants thus gets what a group of one gets, whenever each
tenant's backlog was queued, and a tenant of a group that asks for less
than its part passes the group's backlog at the group's next turn.
]]

-- innerPlace writes a place of a group's order, to sort as text.
local function innerPlace(p) return format('%020.6f', p) end

-- innerFind returns the group and the place (as text) of a job's entry
-- in the groups' order I, and the entry, or nil when it has none.
local function innerFind(I, m)
  local e = call('ZRANGEBYLEX', I, '[>' .. m .. ' ', '(>' .. m .. '!', 'LIMIT', 0, 1)[1]
  if not e then return nil end
  local g, ps = match(e, '^>%S+ (%S+) (%S+)$')
  return g, ps, e
end

-- innerHead returns the member of group g's next job in its own order.
local function innerHead(I, g)
  local e = call('ZRANGEBYLEX', I, '[' .. g .. ' ', '(' .. g .. '!', 'LIMIT', 0, 1)[1]
  return e and match(e, '^%S+ %S+ (%S+)$')
end

-- innerDrop takes job m out of the groups' order, as called: its
-- group's order moves on to its place.
local function innerDrop(I, V, m)
  local g, ps, e = innerFind(I, m)
  if not g then return end
  call('ZREM', I, e, g .. ' ' .. ps .. ' ' .. m)
  local p = tonum(ps) or 0
  if p > (tonum(call('HGET', V, '#' .. g) or 0) or 0) then call('HSET', V, '#' .. g, format('%.17g', p)) end
end

-- innerPlaced places job m of tenant ten, cost c and weight w, in group
-- g's order, and enters it in I when it waits in the list (queued);
-- granted at once, it is the group's order called.
local function innerPlaced(I, V, g, ten, m, c, w, queued)
  local G = tonum(call('HGET', V, '#' .. g) or 0) or 0
  local f = tonum(call('HGET', V, g .. '/' .. ten) or 0) or 0
  local idle = f < G
  if idle then f = G end
  local p = f + c / w
  call('HSET', V, g .. '/' .. ten, format('%.17g', p))
  if queued then
    -- A tenant with nothing placed past G asks for less than its part:
    -- its job stands just before G (as a quiet flow's before V, SHARED
    -- LEVELS), the group's next, not tied with its backlogs' next turns.
    local at = p
    if idle then at = G - 0.000001 end
    local ps = innerPlace(at)
    call('ZADD', I, 0, g .. ' ' .. ps .. ' ' .. m, 0, '>' .. m .. ' ' .. g .. ' ' .. ps)
  elseif p > G then
    call('HSET', V, '#' .. g, format('%.17g', p))
  end
end
