-- KEYS: the seed marker, then (limit, state, block) for each bucket of a send.
-- ARGV: n, the tokens asked for (> 0).
-- Returns {granted, wait_s} with wait_s a string ('-1' for never), or {-1, '0'} when the
-- marker is gone: Redis lost its data (restart, flush) and the caller must seed it again.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {-1, '0'}
end
local n = tonumber(ARGV[1])
local now = now_s()
local buckets, blocked, granted = {}, 0, n
for i = 2, #KEYS, 3 do
  blocked = math.max(blocked, blocked_for(KEYS[i + 2], now))
  local b = load(KEYS[i], KEYS[i + 1], now)
  if b then
    b.key = KEYS[i + 1]
    buckets[#buckets + 1] = b
    granted = math.min(granted, whole(b.tokens))
  end
end
if blocked > 0 then
  granted = 0
end
if granted > 0 then
  for _, b in ipairs(buckets) do
    b.tokens = b.tokens - granted
    save(b.key, b, now)
  end
end
if granted == n then
  return {granted, '0'}
end
local wait = blocked
for _, b in ipairs(buckets) do
  local w = wait_one(b, now)
  if w < 0 then
    return {granted, '-1'}
  end
  wait = math.max(wait, w)
end
return {granted, str(wait)}
