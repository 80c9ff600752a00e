-- Token limits for one key, shared by every replica: a reservation at admission and its
-- settlement when the answer is done, each one atomic script run on Redis's clock.
--
-- KEYS[1]: the per-minute GCRA's theoretical arrival time (TAT), µs since the Unix epoch.
-- KEYS[2]: the period budget, a hash {p = period start (Unix s), s = tokens spent in it}.
-- ARGV[1]: 'reserve' or 'settle'.
-- ARGV[2]: the Unix time in µs to use instead of TIME ('' when serving; tests roll periods).
-- ARGV[3]: the period, 'day' or 'month' ('' without a budget).
--
-- reserve: ARGV[4] tokens; ARGV[5] their GCRA charge in µs (0: no per-minute limit);
--   ARGV[6] the budget (0: none). Both limits are charged, or neither.
--   Returns {admitted, refused_by (0 none, 1 per minute, 2 budget), retry_after_us (-1 never),
--   minute lead after the call (µs), spent after the call, period start, period end, now (s)}.
-- settle: ARGV[4] change of the TAT in µs (negative: refund); ARGV[5] change of the tokens
--   spent (negative: refund); ARGV[6] the period start the reservation was charged to.
--   A refund goes only to the period that was charged; an excess is charged to the current
--   period. Returns {minute lead (µs), spent}.
--
-- Both keys expire by themselves: the TAT once it is in the past, the budget a minute after
-- its period ends. The period arithmetic (UTC day, or UTC calendar month by Hinnant's
-- civil_from_days) matches infergate-traffic's period.rs; a test checks that they agree.

local now
if ARGV[2] ~= '' then
  now = tonumber(ARGV[2])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local now_s = math.floor(now / 1000000)
local minute = 60000000

local function bounds(period)
  local days = math.floor(now_s / 86400)
  if period == 'day' then
    return days * 86400, (days + 1) * 86400
  end
  local z = days + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524)
    - math.floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local d = doy - math.floor((153 * mp + 2) / 5) + 1
  local m = mp < 10 and mp + 3 or mp - 9
  local y = yoe + era * 400
  if m <= 2 then y = y + 1 end
  local len = 31
  if m == 2 then
    len = ((y % 4 == 0 and y % 100 ~= 0) or y % 400 == 0) and 29 or 28
  elseif m == 4 or m == 6 or m == 9 or m == 11 then
    len = 30
  end
  local start = days - (d - 1)
  return start * 86400, (start + len) * 86400
end

local function set_tat(tat)
  if tat > now then
    redis.call('SET', KEYS[1], string.format('%d', tat), 'PX', math.ceil((tat - now) / 1000))
  else
    redis.call('DEL', KEYS[1])
  end
end

local function lead()
  local tat = tonumber(redis.call('GET', KEYS[1]) or now)
  if tat < now then tat = now end
  return tat - now
end

local function set_budget(start, finish, spent)
  redis.call('HSET', KEYS[2], 'p', string.format('%d', start), 's', string.format('%d', spent))
  redis.call('PEXPIRE', KEYS[2], (finish - now_s) * 1000 + 60000)
end

local function spent_in(start)
  local h = redis.call('HMGET', KEYS[2], 'p', 's')
  if tonumber(h[1]) == start then return tonumber(h[2]) or 0 end
  return 0
end

if ARGV[1] == 'reserve' then
  local tokens = tonumber(ARGV[4])
  local charge = tonumber(ARGV[5])
  local budget = tonumber(ARGV[6])
  local ahead = lead()
  local after = ahead + charge
  local refused_by, retry = 0, 0
  if charge > 0 and after > minute then
    refused_by = 1
    retry = charge > minute and -1 or after - minute
  end
  local start, finish, spent = 0, 0, 0
  if budget > 0 then
    start, finish = bounds(ARGV[3])
    spent = spent_in(start)
    if refused_by == 0 and spent + tokens > budget then
      refused_by = 2
      retry = tokens > budget and -1 or finish * 1000000 - now
    end
  end
  if refused_by ~= 0 then
    return {0, refused_by, retry, ahead, spent, start, finish, now_s}
  end
  if charge > 0 then set_tat(now + after) end
  if budget > 0 then
    spent = spent + tokens
    set_budget(start, finish, spent)
  end
  return {1, 0, 0, after, spent, start, finish, now_s}
end

if ARGV[1] == 'settle' then
  local dt = tonumber(ARGV[4])
  local ds = tonumber(ARGV[5])
  if dt ~= 0 then
    -- A missing TAT is one in the past: the refund has nothing left to give back.
    set_tat(now + lead() + dt)
  end
  local spent = 0
  if ARGV[3] ~= '' then
    local start, finish = bounds(ARGV[3])
    spent = spent_in(start)
    if ds < 0 and tonumber(ARGV[6]) == start then
      spent = math.max(0, spent + ds)
      set_budget(start, finish, spent)
    elseif ds > 0 then
      spent = spent + ds
      set_budget(start, finish, spent)
    end
  end
  return {lead(), spent}
end

return redis.error_reply('tokens.lua: unknown operation ' .. tostring(ARGV[1]))
