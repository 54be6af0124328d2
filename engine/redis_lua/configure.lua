-- KEYS: the set of configured buckets, then the bucket's limit and state.
-- ARGV: the bucket's member name in the set, rate ('' removes the limit), burst, and
-- 'full' or 'empty': how a bucket that had no limit starts.
-- A bucket that had one is brought up to date at the old rate, then takes the new rate and
-- burst, its tokens clamped to the new burst. A removal keeps any block on the key.
local now = now_s()
if ARGV[2] == '' then
  redis.call('DEL', KEYS[2], KEYS[3])
  redis.call('SREM', KEYS[1], ARGV[1])
  return 0
end
local rate, burst = tonumber(ARGV[2]), tonumber(ARGV[3])
local old = load(KEYS[2], KEYS[3], now)
redis.call('HSET', KEYS[2], 'rate', ARGV[2], 'burst', ARGV[3])
redis.call('SADD', KEYS[1], ARGV[1])
if old then
  save(KEYS[3], {rate = rate, burst = burst, tokens = math.min(old.tokens, burst), stamp = old.stamp}, now)
elseif ARGV[4] == 'empty' then
  save(KEYS[3], {rate = rate, burst = burst, tokens = 0, stamp = now}, now)
else
  redis.call('DEL', KEYS[3])
end
return 1
