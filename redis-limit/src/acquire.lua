-- A concurrency slot for one key, held as a lease that expires.
-- KEYS[1]: sorted set of leases, scored by expiry (ms, Redis clock).
-- ARGV[1]: lease id; ARGV[2]: cap; ARGV[3]: lease time-to-live (ms).
-- Returns the number of leases held after the call if granted, -1 if the cap is reached.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- Leases of replicas that crashed (never released, never renewed) lapse here.
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local held = redis.call('ZCARD', KEYS[1])
if held >= tonumber(ARGV[2]) then
  return -1
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]) + 1000)
return held + 1
