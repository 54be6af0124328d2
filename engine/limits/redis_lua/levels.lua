-- KEYS: each bucket. Changes nothing.
-- Returns, per bucket, {tokens, burst, rate, blocked_for_s} as strings, or {} when the
-- bucket has no limit (removed since the caller listed it).
local now = now_s()
local out = {}
for i = 1, #KEYS do
  local f = fields(KEYS[i])
  local b = load(f, now)
  if b then
    out[#out + 1] = {str(b.tokens), str(b.burst), str(b.rate), str(blocked_for(f, now))}
  else
    out[#out + 1] = {}
  end
end
return out
