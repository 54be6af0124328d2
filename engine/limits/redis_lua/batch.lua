-- KEYS: the seed marker, the set of processes that reserved lately, then the buckets of every
-- entry, entry after entry.
-- ARGV: this process's name in that set ('' leaves the set alone: written a few times a second,
-- as in reserve.lua), how many seconds a process stays in it after its last reservation; then
-- per entry: how many buckets it has, n (the tokens asked for; 0 for a refund), its flags (1:
-- the tokens it takes are lent, as a claim's first take, which its retake or refund settles;
-- 2: the reservation it gives back was lent), the tokens to give back to each of its buckets
-- first (a retake's earlier reservation, or a refund's tokens), and, only when that is above
-- 0, the Redis time of the take given back and each bucket's room just after it (burst less
-- level), as reserve.lua and this script answer them ('' for both: no bound). A bucket gets
-- back at most what it would hold had those tokens never been taken: the room less what it
-- refilled since, and for a lent reservation never more than its `lent` (common.lua): what
-- the lent reservations not yet settled, none of them taken, would have left it. Given back
-- whole, a reservation made before a bucket refilled to its burst would fill it again after a
-- claim, once per key sharing it (a provider's), and the sends would spend its burst twice;
-- bounded by its own room alone, the claims of several processes that overlap in time each
-- gave back what the others' had also counted on (four workers at 10,000 tenants: a
-- provider's 0.1 s window at 1.13 of its bound).
-- Each entry is what reserve.lua (n > 0) or a refund (n = 0) does, in order and at one
-- reading of TIME: each sees what the entries before it took and gave back. A bucket is read
-- once, when an entry first names it, and written once, at the end, if any entry changed it: so
-- a read that fails (WRONGTYPE) leaves every bucket as it was.
-- Returns {0, processes, now, then per entry granted, wait, held, room_1 .. room_count}: granted
-- and wait as reserve.lua returns them, held the place (1 for the entry's first bucket) of the
-- bucket that held the entry short (the one blocked longest, else the one that takes longest
-- to have a token), 0 when it got all it asked for (a refund's: 0, '0', 0; processes -1 when
-- the set was left alone), and each bucket's room after the entry ('0' for a key without a
-- limit): a caller that knows which bucket ran dry (a provider's, shared by many entries) need
-- not ask its other entries again before it refills. Or {-1} when an entry reserves and the
-- marker is gone (Redis lost its data): nothing is done, and the caller seeds Redis and calls
-- again.
local entries, a = {}, 3
while a <= #ARGV do
  local count, n, flags = tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  local back = tonumber(ARGV[a + 3])
  local e = {count = count, n = n, lend = flags % 2 == 1, lent_back = flags >= 2, back = back,
    at = false, rooms = a + 4}
  a = a + 4
  if back > 0 then
    if ARGV[a] ~= '' then
      e.at = tonumber(ARGV[a])
    end
    e.rooms = a + 1
    a = a + 1 + count
  end
  entries[#entries + 1] = e
end
for _, e in ipairs(entries) do
  if e.n > 0 then
    if redis.call('EXISTS', KEYS[1]) == 0 then
      return {-1}
    end
    break
  end
end
local now = now_s()
local processes = -1
if ARGV[1] ~= '' then
  local seen_s = tonumber(ARGV[2])
  redis.call('ZADD', KEYS[2], now, ARGV[1])
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. str(now - seen_s))
  redis.call('PEXPIRE', KEYS[2], ms(seen_s))
  processes = redis.call('ZCARD', KEYS[2])
end

-- Per bucket read so far: {b = the bucket or false (no limit), held = seconds blocked, dirty}.
local seen, order = {}, {}
local function state(key)
  local s = seen[key]
  if not s then
    local f = fields(key)
    s = {b = load(f, now) or false, held = blocked_for(f, now), dirty = false}
    seen[key] = s
    order[#order + 1] = key
  end
  return s
end

-- Seconds until every bucket of `mine` has one more token (`blocked` at least), as a string,
-- and the place of the bucket that takes longest (`held_at`, blocked, when it is the longest).
local function wait_for(mine, places, blocked, held_at)
  local wait, at = blocked, held_at
  for i, s in ipairs(mine) do
    local w = wait_one(s.b, now)
    if w < 0 then
      return '-1', places[i]
    end
    if w > wait then
      wait, at = w, places[i]
    end
  end
  return str(wait), at
end

local out, k = {0, processes, str(now)}, 2
for _, e in ipairs(entries) do
  local count, n, back = e.count, e.n, e.back
  local mine, places, blocked, held_at, granted = {}, {}, 0, 0, n
  for i = k + 1, k + count do
    local s = state(KEYS[i])
    if s.held > blocked then
      blocked, held_at = s.held, i - k
    end
    if s.b then
      places[#mine + 1] = i - k
      if s.held == 0 and back > 0 then
        local give = back
        if e.lent_back then
          give = math.min(give, s.b.lent)
        end
        if e.at then  -- the room its take left, less what the bucket refilled since
          give = math.min(give, tonumber(ARGV[e.rooms + i - k - 1]) - s.b.rate * math.max(0, now - e.at))
        end
        if give > 0 then
          s.b.tokens = math.min(s.b.burst, s.b.tokens + give)
          if e.lent_back then
            s.b.lent = s.b.lent - give
          else  -- the level none of the lent ones taken is at most the burst
            s.b.lent = math.min(s.b.lent, s.b.burst - s.b.tokens)
          end
          s.dirty = true
        end
      end
      mine[#mine + 1] = s
      granted = math.min(granted, whole(s.b.tokens))
    end
  end
  if blocked > 0 then
    granted = 0
  end
  if granted > 0 then
    for _, s in ipairs(mine) do
      s.b.tokens = s.b.tokens - granted
      if e.lend then
        s.b.lent = s.b.lent + granted
      end
      s.dirty = true
    end
  end
  out[#out + 1] = granted
  if granted == n then
    out[#out + 1] = '0'
    out[#out + 1] = 0
  else
    local wait, at = wait_for(mine, places, blocked, held_at)
    out[#out + 1] = wait
    out[#out + 1] = at
  end
  for i = k + 1, k + count do
    local b = seen[KEYS[i]].b
    out[#out + 1] = b and str(b.burst - b.tokens) or '0'
  end
  k = k + count
end
for _, key in ipairs(order) do
  local s = seen[key]
  if s.dirty then
    save(key, s.b, now)
  end
end
return out
