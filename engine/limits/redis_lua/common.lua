-- Shared by every script (prepended to each). A bucket is ONE hash, its fields:
--   rate, burst   the limit every process reads; absent = no limit (the key is unlimited);
--   tokens, stamp the level as of `stamp` (Redis seconds); absent = full. Dropped (HDEL)
--                 whenever a write finds the bucket full again;
--   lent          tokens out on lent reservations (a claim's first take, which its retake or
--                 refund always settles), as of `stamp`; absent = 0. The level the bucket
--                 would have had none of them been taken is `tokens + lent` refilled as a
--                 bucket of its own (capped at the burst: what it would have lost is lost to
--                 `lent`), and no refund gives back more than `lent`: refunds of lent
--                 reservations that overlap in time (several processes' claims) never give
--                 the bucket a token that every one of them, not taken, would have lost to
--                 its burst. Absent when 0, and dropped with `tokens`.
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

-- One read per bucket: {rate, burst, tokens, stamp, block_until, lent} as stored (false =
-- absent).
local function fields(key)
  return redis.call('HMGET', key, 'rate', 'burst', 'tokens', 'stamp', 'block_until', 'lent')
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
  local b = {rate = tonumber(f[1]), burst = tonumber(f[2]), tokens = nil, stamp = now, lent = 0,
    stored_lent = f[6] ~= false}
  if f[3] then
    b.tokens, b.stamp, b.lent = tonumber(f[3]), tonumber(f[4]), tonumber(f[6] or '0')
  else
    b.tokens = b.burst
  end
  if now > b.stamp then
    local added = (now - b.stamp) * b.rate
    local tokens = math.min(b.burst, b.tokens + added)
    b.lent = math.max(0, math.min(b.burst, b.tokens + b.lent + added) - tokens)
    b.tokens = tokens
    b.stamp = now
  end
  return b
end

-- Write the level back, or drop it when the bucket is full (nothing left to keep).
local function save(key, b, now)
  local full_in_s = math.max(0, b.stamp - now) + (b.burst - b.tokens) / b.rate
  if full_in_s <= 0 then
    redis.call('HDEL', key, 'tokens', 'stamp', 'lent')
    return
  end
  if b.lent > 0 then
    redis.call('HSET', key, 'tokens', b.tokens, 'stamp', b.stamp, 'lent', b.lent)
    return
  end
  redis.call('HSET', key, 'tokens', b.tokens, 'stamp', b.stamp)
  if b.stored_lent then
    redis.call('HDEL', key, 'lent')
  end
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
