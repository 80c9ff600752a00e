-- Extends a held lease (a long request keeps its slot). KEYS[1]: the lease set;
-- ARGV[1]: lease id; ARGV[2]: time-to-live (ms). Returns 1 if the lease was still held.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expiry = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not expiry or tonumber(expiry) <= now then
  -- Lapsed: its slot may already be someone else's.
  return 0
end
redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[2]), ARGV[1])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]) + 1000)
return 1
