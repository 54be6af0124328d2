-- KEYS: (limit, state, block) for each bucket of a reservation. ARGV: n tokens to give back.
-- Blocked buckets stay empty until their block ends; levels never exceed the burst.
local n = tonumber(ARGV[1])
local now = now_s()
for i = 1, #KEYS, 3 do
  if blocked_for(KEYS[i + 2], now) == 0 then
    local b = load(KEYS[i], KEYS[i + 1], now)
    if b then
      b.tokens = math.min(b.burst, b.tokens + n)
      save(KEYS[i + 1], b, now)
    end
  end
end
return 0
