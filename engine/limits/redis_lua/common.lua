-- Shared by every script (prepended to each). A bucket is ONE hash, its fields:
--   rate, burst   the limit every process reads; absent = no limit (the key is unlimited);
--   tokens, stamp the level as of `stamp` (Redis seconds); absent = full. Dropped (HDEL)
--                 whenever a write finds the bucket full again;
--   block_until   the Redis time a provider's 429 holds the key closed until; absent or past
--                 = not blocked.
-- A hash with a limit never expires; one holding only a block expires when the block ends.
-- A Lua number given to redis.call is written with 17 significant digits (exact), so levels
-- go in as numbers; but one returned to the client is truncated to an integer, and fractions
-- of a token matter, so results leave as strings (`str`).

-- A level within EPSILON of a whole token counts as that token (float rounding at the instant
-- it falls due); the hair lent stays as a debt, as in engine/ratelimit.py.
local EPSILON = 1e-9

local function whole(tokens)
  return math.floor(tokens + EPSILON)
end

local function now_s()
  local t = redis.call('TIME')
  return tonumber(t[1]) + tonumber(t[2]) / 1000000
end

local function str(x)
  return string.format('%.17g', x)
end

local function ms(seconds)
  return string.format('%d', math.max(1, math.ceil(seconds * 1000)))
end

-- One read per bucket: {rate, burst, tokens, stamp, block_until} as stored (false = absent).
local function fields(key)
  return redis.call('HMGET', key, 'rate', 'burst', 'tokens', 'stamp', 'block_until')
end

-- Seconds the key is still blocked for, from what `fields` read.
local function blocked_for(f, now)
  if not f[5] then
    return 0
  end
  return math.max(0, tonumber(f[5]) - now)
end

-- The bucket refilled up to `now`, or nil when the key has no limit. Time going backwards
-- (a stamp in the future: a block, or a Redis clock stepped back) adds nothing.
local function load(f, now)
  if not f[1] then
    return nil
  end
  local b = {rate = tonumber(f[1]), burst = tonumber(f[2]), tokens = nil, stamp = now}
  if f[3] then
    b.tokens, b.stamp = tonumber(f[3]), tonumber(f[4])
  else
    b.tokens = b.burst
  end
  if now > b.stamp then
    b.tokens = math.min(b.burst, b.tokens + (now - b.stamp) * b.rate)
    b.stamp = now
  end
  return b
end

-- Write the level back, or drop it when the bucket is full (nothing left to keep).
local function save(key, b, now)
  local full_in_s = math.max(0, b.stamp - now) + (b.burst - b.tokens) / b.rate
  if full_in_s <= 0 then
    redis.call('HDEL', key, 'tokens', 'stamp')
    return
  end
  redis.call('HSET', key, 'tokens', b.tokens, 'stamp', b.stamp)
end

-- Seconds until one more token is there, or -1 for never (a burst below 1).
local function wait_one(b, now)
  if b.burst < 1 then
    return -1
  end
  local missing = 1 - b.tokens
  if missing <= EPSILON then
    return 0
  end
  return math.max(0, b.stamp - now) + missing / b.rate
end
