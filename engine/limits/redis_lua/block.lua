-- KEYS: one bucket. ARGV: for_s (finite; <= 0 only drains).
-- Holds the key closed until now + for_s; a shorter block never cuts a longer one short.
-- A configured bucket is drained and stamped at the block's end: no refill before it. An
-- unconfigured key's hash holds only the block and expires with it.
local now = now_s()
local f = fields(KEYS[1])
local until_s = math.max(now, now + tonumber(ARGV[1]), tonumber(f[5] or '0'))
if until_s > now then
  redis.call('HSET', KEYS[1], 'block_until', until_s)
end
local b = load(f, now)
if b then
  b.tokens, b.lent = 0, 0
  b.stamp = math.max(b.stamp, until_s)
  save(KEYS[1], b, now)
elseif until_s > now then
  redis.call('PEXPIRE', KEYS[1], ms(until_s - now))
end
return 0
