-- KEYS: the seed marker, the set of processes that reserved lately, then each bucket of a send.
-- ARGV: n, the tokens asked for (> 0); this process's name in that set, or '' to leave the set
-- alone this time (a process writes it a few times a second, not on every reservation); how
-- many seconds a process stays in it after its last reservation; tokens to give back to each
-- bucket first (0 for none: a retake gives back its earlier reservation, as refund.lua does,
-- and takes again in the same step).
-- Returns {granted, wait_s, processes}: wait_s a string ('-1' for never), processes how many
-- reserved within that time, this one included (the share each falls back to if Redis goes
-- away), or -1 when the set was left alone. Or {-1, '0', 0} when the marker is gone: Redis lost
-- its data (restart, flush) and the caller must seed it again.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {-1, '0', 0}
end
local n = tonumber(ARGV[1])
local now = now_s()
local processes = -1
if ARGV[2] ~= '' then
  local seen_s = tonumber(ARGV[3])
  redis.call('ZADD', KEYS[2], str(now), ARGV[2])
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. str(now - seen_s))
  redis.call('PEXPIRE', KEYS[2], ms(seen_s))
  processes = redis.call('ZCARD', KEYS[2])
end
local back = tonumber(ARGV[4])
local buckets, keys, blocked, granted = {}, {}, 0, n
for i = 3, #KEYS do
  local f = fields(KEYS[i])
  local held = blocked_for(f, now)
  blocked = math.max(blocked, held)
  local b = load(f, now)
  if b then
    if held == 0 then
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
  return {granted, '0', processes}
end
local wait = blocked
for _, b in ipairs(buckets) do
  local w = wait_one(b, now)
  if w < 0 then
    return {granted, '-1', processes}
  end
  wait = math.max(wait, w)
end
return {granted, str(wait), processes}
