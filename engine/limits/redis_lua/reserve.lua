-- KEYS: the seed marker, each bucket of a send, and last, only when ARGV[3] is given, the set
-- of processes that reserved lately.
-- ARGV: n, the tokens asked for (> 0); tokens to give back to each bucket first (0 for none: a
-- retake gives back its earlier reservation, as refund.lua does, and takes again in the same
-- step); then, only a few times a second (not on every reservation), this process's name in
-- that set and how many seconds a process stays in it after its last reservation.
-- Returns {granted, wait_s, processes, held}: wait_s a string ('-1' for never), processes how
-- many reserved within that time, this one included (the share each falls back to if Redis
-- goes away), or -1 when the set was left alone; held the place (1 for the first bucket) of the
-- bucket that held the send short, as batch.lua says it, 0 when it got all it asked for. Or
-- {-1, '0', 0, 0} when the marker is gone: Redis lost its data (restart, flush) and the caller
-- must seed it again.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {-1, '0', 0, 0}
end
local n, back = tonumber(ARGV[1]), tonumber(ARGV[2])
local now = now_s()
local last, processes = #KEYS, -1
if ARGV[3] then
  local seen_s = tonumber(ARGV[4])
  redis.call('ZADD', KEYS[last], now, ARGV[3])
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
    if held == 0 and back > 0 then
      b.tokens = math.min(b.burst, b.tokens + back)
    end
    buckets[#buckets + 1] = b
    keys[#buckets] = KEYS[i]
    granted = math.min(granted, whole(b.tokens))
  end
end
if blocked > 0 then
  granted = 0
end
if granted > 0 or back > 0 then
  for i, b in ipairs(buckets) do
    b.tokens = b.tokens - granted
    save(keys[i], b, now)
  end
end
if granted == n then
  return {granted, '0', processes, 0}
end
local wait = blocked
for i, b in ipairs(buckets) do
  local w = wait_one(b, now)
  if w < 0 then
    return {granted, '-1', processes, places[i]}
  end
  if w > wait then
    wait, held_at = w, places[i]
  end
end
return {granted, str(wait), processes, held_at}
