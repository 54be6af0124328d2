-- KEYS: one bucket's limit, state and block. ARGV: for_s (finite; <= 0 only drains).
-- Holds the key closed until now + for_s; a shorter block never cuts a longer one short.
-- A configured bucket is drained and stamped at the block's end: no refill before it.
local now = now_s()
local until_s = math.max(now, now + tonumber(ARGV[1]), tonumber(redis.call('GET', KEYS[3]) or '0'))
if until_s > now then
  local ms = math.max(1, math.ceil((until_s - now) * 1000))
  redis.call('SET', KEYS[3], str(until_s), 'PX', string.format('%d', ms))
end
local b = load(KEYS[1], KEYS[2], now)
if b then
  b.tokens = 0
  b.stamp = math.max(b.stamp, until_s)
  save(KEYS[2], b, now)
end
return 0
