-- KEYS: the seed marker, each bucket of a send, and last, only when ARGV[2] is given, the set
-- of processes that reserved lately.
-- ARGV: n, the tokens asked for (> 0); then, only a few times a second (not on every
-- reservation), this process's name in that set and how many seconds a process stays in it
-- after its last reservation. (A retake or a refund is batch.lua's: it bounds what it gives back
-- by the rooms answered here.)
-- Returns {granted, wait_s, processes, held, now, room_1 .. room_count}: wait_s a string ('-1'
-- for never), processes how many reserved within that time, this one included (the share each
-- falls back to if Redis goes away), or -1 when the set was left alone; held the place (1 for
-- the first bucket) of the bucket that held the send short, as batch.lua says it, 0 when it got
-- all it asked for; now Redis's time and each bucket's room (burst less level) after the take,
-- '0' for a key without a limit, as strings. Or {-1, '0', 0, 0} when the marker is gone: Redis
-- lost its data (restart, flush) and the caller must seed it again.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {-1, '0', 0, 0}
end
local n = tonumber(ARGV[1])
local now = now_s()
local last, processes = #KEYS, -1
if ARGV[2] then
  local seen_s = tonumber(ARGV[3])
  redis.call('ZADD', KEYS[last], now, ARGV[2])
  redis.call('ZREMRANGEBYSCORE', KEYS[last], '-inf', '(' .. str(now - seen_s))
  redis.call('PEXPIRE', KEYS[last], ms(seen_s))
  processes = redis.call('ZCARD', KEYS[last])
  last = last - 1
end
local buckets, keys, places, blocked, held_at, granted = {}, {}, {}, 0, 0, n
for i = 2, last do
  local f = fields(KEYS[i])
  local held = blocked_for(f, now)
  if held > blocked then
    blocked, held_at = held, i - 1
  end
  local b = load(f, now)
  if b then
    places[#buckets + 1] = i - 1
    buckets[#buckets + 1] = b
    keys[#buckets] = KEYS[i]
    granted = math.min(granted, whole(b.tokens))
  end
end
if blocked > 0 then
  granted = 0
end
if granted > 0 then
  for i, b in ipairs(buckets) do
    b.tokens = b.tokens - granted
    save(keys[i], b, now)
  end
end
local out = {granted, '0', processes, 0, str(now)}
if granted < n then
  local wait = blocked
  for i, b in ipairs(buckets) do
    local w = wait_one(b, now)
    if w < 0 then
      wait, held_at = -1, places[i]
      break
    end
    if w > wait then
      wait, held_at = w, places[i]
    end
  end
  out[2] = wait < 0 and '-1' or str(wait)
  out[4] = held_at
end
local next_bucket = 1
for i = 2, last do
  if places[next_bucket] == i - 1 then
    out[#out + 1] = str(buckets[next_bucket].burst - buckets[next_bucket].tokens)
    next_bucket = next_bucket + 1
  else
    out[#out + 1] = '0'
  end
end
return out
