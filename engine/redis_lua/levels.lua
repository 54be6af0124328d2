-- KEYS: (limit, state, block) for each bucket. Changes nothing.
-- Returns, per bucket, {tokens, burst, rate, blocked_for_s} as strings, or {} when the
-- bucket has no limit (removed since the caller listed it).
local now = now_s()
local out = {}
for i = 1, #KEYS, 3 do
  local b = load(KEYS[i], KEYS[i + 1], now)
  if b then
    out[#out + 1] = {str(b.tokens), str(b.burst), str(b.rate), str(blocked_for(KEYS[i + 2], now))}
  else
    out[#out + 1] = {}
  end
end
return out
