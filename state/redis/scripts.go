package redis

import goredis "github.com/redis/go-redis/v9"

// The scripts run on the server, so that each operation is one round trip
// and atomic, and every time in them is Redis's own: a cooldown is a key
// that expires (SET PX, PEXPIRE), read back with PTTL, never a timestamp a
// replica wrote with its own clock. go-redis runs them with EVALSHA and
// falls back to EVAL when the server answers NOSCRIPT (after a restart).
//
// A model's keys (see keysOf): c exists while it cools down (PTTL is the
// rest); h exists from a cooldown's start until max(For, Max,
// halfOpenFloor) after its end, holds the length of the cooldown (ms) that
// an adaptive one doubles, and without c it means half-open; f is the consecutive
// failure count, which expires For after it last grew (or with h, during a
// cooldown);
// p is the half-open probe's lease. A scope's key blocks it while it
// exists. A sticky key is a hash {m: model, n: requests left} (n absent
// for a period policy, whose key expires with the period). A budget key is
// a hash {r: requests, t: retries} counted over a window that starts with
// its first request and ends when the key expires.

// beginScript is State.Begin. KEYS: 4 per model (c h f p), 1 per scope,
// then the sticky key if ARGV[3] is "1", then the budget key if ARGV[4] is
// "1". ARGV: models, scopes, sticky, budget, the budget window (ms). It
// returns per model {failures, cooling ms, half-open, probing}, per scope
// its block's rest (ms), then the sticky model ("" for none).
var beginScript = goredis.NewScript(`
local nm, ns = tonumber(ARGV[1]), tonumber(ARGV[2])
local out = {}
local i = 1
for _ = 1, nm do
  local f = tonumber(redis.call('GET', KEYS[i+2]) or '0') or 0
  local cool = redis.call('PTTL', KEYS[i])
  local half, probing = 0, 0
  if cool < 0 then
    cool = 0
    if redis.call('EXISTS', KEYS[i+1]) == 1 then
      half = 1
      probing = redis.call('EXISTS', KEYS[i+3])
    end
  end
  out[#out+1] = f
  out[#out+1] = cool
  out[#out+1] = half
  out[#out+1] = probing
  i = i + 4
end
for _ = 1, ns do
  local t = redis.call('PTTL', KEYS[i])
  if t < 0 then t = 0 end
  out[#out+1] = t
  i = i + 1
end
local sticky = ''
if ARGV[3] == '1' then
  local v = redis.call('HMGET', KEYS[i], 'm', 'n')
  if v[1] then
    if v[2] then
      local n = tonumber(v[2]) or 0
      if n > 0 then sticky = v[1] end
      if n <= 1 then redis.call('DEL', KEYS[i]) else redis.call('HINCRBY', KEYS[i], 'n', -1) end
    else
      sticky = v[1]
    end
  end
  i = i + 1
end
out[#out+1] = sticky
if ARGV[4] == '1' then
  redis.call('HINCRBY', KEYS[i], 'r', 1)
  if redis.call('PTTL', KEYS[i]) < 0 then redis.call('PEXPIRE', KEYS[i], ARGV[5]) end
end
return out
`)

// failedScript is State.Failed. KEYS: c h f p of the model, then the scope's
// key (or an unused one). ARGV: Failures, For (ms), RetryAfter (ms), has a
// scope ("1"), how long a half-open state lasts past the cooldown (ms),
// Max (ms). It returns {failures, cooling ms, cooled}. The half-open key
// holds the length of the latest cooldown (ms), which a failed probe's
// doubles when Max is above For.
var failedScript = goredis.NewScript(`
local need, forMs, ra, keep, maxMs = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[5]), tonumber(ARGV[6])
local n = tonumber(redis.call('GET', KEYS[3]) or '0') or 0
n = n + 1
local rest = redis.call('PTTL', KEYS[1])
if rest < 0 then rest = 0 end
local cooling = rest > 0
local half = (not cooling) and redis.call('EXISTS', KEYS[2]) == 1
local cooled = 0
local last = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
local function cool(d)
  redis.call('SET', KEYS[1], '1', 'PX', d)
  redis.call('SET', KEYS[2], last, 'PX', d + keep)
  redis.call('DEL', KEYS[4])
  rest = d
  cooled = 1
end
if (n >= need and not cooling) or half then
  local d = forMs
  if half and maxMs > forMs then
    d = math.min(math.max(2 * last, forMs), maxMs)
  end
  last = d
  cool(math.max(d, ra))
  n = math.max(need - 1, 0)
end
if ra > 0 then
  if ra > rest then
    cool(ra)
    n = math.max(n, need - 1)
  end
  if ARGV[4] == '1' and ra > redis.call('PTTL', KEYS[5]) then
    redis.call('SET', KEYS[5], '1', 'PX', ra)
  end
end
local ttl = forMs
if rest > 0 then ttl = rest + keep end
redis.call('SET', KEYS[3], n, 'PX', ttl)
return {n, rest, cooled}
`)

// succeededScript is State.Succeeded. KEYS: c h f p. It returns 1 when the
// model was cooling down or half-open.
var succeededScript = goredis.NewScript(`
local ended = redis.call('EXISTS', KEYS[1], KEYS[2])
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
if ended > 0 then return 1 end
return 0
`)

// probeScript is State.TakeProbe. KEYS: c h p. ARGV: the lease (ms).
var probeScript = goredis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
if redis.call('EXISTS', KEYS[2]) == 0 then return 1 end
if redis.call('SET', KEYS[3], '1', 'NX', 'PX', ARGV[1]) then return 1 end
return 0
`)

// stickyScript is State.SetSticky. KEYS: the sticky key. ARGV: model,
// requests (0 for a period), TTL (ms).
var stickyScript = goredis.NewScript(`
redis.call('DEL', KEYS[1])
if ARGV[2] ~= '0' then
  redis.call('HSET', KEYS[1], 'm', ARGV[1], 'n', ARGV[2])
else
  redis.call('HSET', KEYS[1], 'm', ARGV[1])
end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
`)

// retryScript is State.TryRetry. KEYS: the budget key. ARGV: Percent,
// MinRetries, the window (ms). It returns 1 when it took a slot.
var retryScript = goredis.NewScript(`
local v = redis.call('HMGET', KEYS[1], 'r', 't')
local r, t = tonumber(v[1] or '0') or 0, tonumber(v[2] or '0') or 0
local allow = math.max(tonumber(ARGV[2]), math.floor(r * tonumber(ARGV[1]) / 100))
if t >= allow then return 0 end
redis.call('HINCRBY', KEYS[1], 't', 1)
if redis.call('PTTL', KEYS[1]) < 0 then redis.call('PEXPIRE', KEYS[1], ARGV[3]) end
return 1
`)

var scripts = []*goredis.Script{beginScript, failedScript, succeededScript, probeScript, stickyScript, retryScript, admitScript, settleScript}
