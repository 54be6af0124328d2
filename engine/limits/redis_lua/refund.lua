-- KEYS: each bucket of a reservation. ARGV: n tokens to give back.
-- Blocked buckets stay empty until their block ends; levels never exceed the burst.
local n = tonumber(ARGV[1])
local now = now_s()
for i = 1, #KEYS do
  local f = fields(KEYS[i])
  if blocked_for(f, now) == 0 then
    local b = load(f, now)
    if b then
      b.tokens = math.min(b.burst, b.tokens + n)
      save(KEYS[i], b, now)
    end
  end
end
return 0
