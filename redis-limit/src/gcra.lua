-- GCRA for one key, on Redis's clock so every replica agrees on "now".
-- KEYS[1]: the key's theoretical arrival time (TAT), microseconds since the epoch.
-- ARGV[1]: emission interval T = 1/rps (µs); ARGV[2]: tolerance tau = burst * T (µs).
-- Returns {allowed (0/1), remaining, reset_us, retry_after_us}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local tau = tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then
  tat = now
end
local new_tat = tat + interval
local ahead = new_tat - now
if ahead > tau then
  -- Refused: the TAT stays; the client may retry once it has fallen back within tau.
  local held = tat - now
  return {0, 0, held, ahead - tau}
end
-- The key expires once its TAT is in the past: an idle key costs nothing.
redis.call('SET', KEYS[1], new_tat, 'PX', math.floor(ahead / 1000) + 1)
return {1, math.floor((tau - ahead) / interval), ahead, 0}
