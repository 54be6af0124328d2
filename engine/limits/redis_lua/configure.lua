-- KEYS: the set of configured buckets, the bucket, the seed marker, the previous layout's
-- seed marker. ARGV: the bucket's member name in the set, rate ('' removes the limit),
-- burst, and 'full' or 'empty': how a bucket that had no limit starts.
-- A bucket that had one is brought up to date at the old rate, then takes the new rate and
-- burst, its tokens clamped to the new burst. A removal keeps any block on the key.
-- While only the previous layout's marker is there (workers just upgraded), a new bucket
-- starts empty: its level in the old keys is unknown, so it may have just been spent.
local now = now_s()
local f = fields(KEYS[2])
if ARGV[2] == '' then
  local blocked = blocked_for(f, now)
  if blocked > 0 then
    redis.call('HDEL', KEYS[2], 'rate', 'burst', 'tokens', 'stamp', 'lent')
    redis.call('PEXPIRE', KEYS[2], ms(blocked))
  else
    redis.call('DEL', KEYS[2])
  end
  redis.call('SREM', KEYS[1], ARGV[1])
  return 0
end
local rate, burst = tonumber(ARGV[2]), tonumber(ARGV[3])
local old = load(f, now)
redis.call('HSET', KEYS[2], 'rate', ARGV[2], 'burst', ARGV[3])
redis.call('SADD', KEYS[1], ARGV[1])
if old then
  local tokens = math.min(old.tokens, burst)
  local lent = math.max(0, math.min(old.lent, burst - tokens))
  save(KEYS[2], {rate = rate, burst = burst, tokens = tokens, stamp = old.stamp, lent = lent,
    stored_lent = old.stored_lent}, now)
  return 1
end
redis.call('PERSIST', KEYS[2])  -- it may have held only a block, expiring with it
local fill = ARGV[4]
if fill == 'full' and redis.call('EXISTS', KEYS[3]) == 0 and redis.call('EXISTS', KEYS[4]) == 1 then
  fill = 'empty'
end
if fill == 'empty' then
  save(KEYS[2], {rate = rate, burst = burst, tokens = 0, stamp = now, lent = 0,
    stored_lent = f[6] ~= false}, now)
else
  redis.call('HDEL', KEYS[2], 'tokens', 'stamp', 'lent')
end
return 1
