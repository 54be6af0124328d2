-- Shared by every script (prepended to each). A bucket is three keys:
--   limit  a hash {rate, burst}, no expiry: the configuration every process reads;
--   state  a hash {tokens, stamp}: the level as of `stamp` (Redis seconds); missing = full.
--          It expires when the bucket would be full again, so idle buckets cost nothing;
--   block  the Redis time a provider's 429 holds the key closed until; expires then.
-- Numbers go into Redis and come back out as strings: a Lua number returned to the client
-- is truncated to an integer, and fractions of a token matter.

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

-- The bucket refilled up to `now`, or nil when the key has no limit. Time going backwards
-- (a stamp in the future: a block, or a Redis clock stepped back) adds nothing.
local function load(limit_key, state_key, now)
  local limit = redis.call('HMGET', limit_key, 'rate', 'burst')
  if not limit[1] then
    return nil
  end
  local b = {rate = tonumber(limit[1]), burst = tonumber(limit[2]), tokens = nil, stamp = now}
  local state = redis.call('HMGET', state_key, 'tokens', 'stamp')
  if state[1] then
    b.tokens, b.stamp = tonumber(state[1]), tonumber(state[2])
  else
    b.tokens = b.burst
  end
  if now > b.stamp then
    b.tokens = math.min(b.burst, b.tokens + (now - b.stamp) * b.rate)
    b.stamp = now
  end
  return b
end

-- Write the level back; it expires when the bucket would be full (never 0: at least 1 ms).
local function save(state_key, b, now)
  local full_in_s = math.max(0, b.stamp - now) + (b.burst - b.tokens) / b.rate
  if full_in_s <= 0 then
    redis.call('DEL', state_key)
    return
  end
  redis.call('HSET', state_key, 'tokens', str(b.tokens), 'stamp', str(b.stamp))
  redis.call('PEXPIRE', state_key, string.format('%d', math.max(1, math.ceil(full_in_s * 1000))))
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

local function blocked_for(block_key, now)
  local until_s = tonumber(redis.call('GET', block_key) or '0')
  return math.max(0, until_s - now)
end
