package redis

import (
	"context"
	"strconv"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/retryhost/retryhost/gateway/vkey"
)

// Limiter keeps virtual keys' rates and budgets (a [vkey.Limiter]) on
// Redis, for a whole fleet: a request's admission is one script (one
// round trip) that checks the key's day and month budgets and takes from
// its RPM and TPM (GCRA on Redis's clock), atomically; the settlement of
// its usage runs after the request, off its path.
//
// While Redis is unreachable (an operation failed or passed
// Options.OpTimeout), the Limiter does what the key set's on_store_down
// says: "local" (the default), each replica limits on its own with a
// [vkey.Local] (a fleet of N replicas then admits up to N times a key's
// limits), or "refuse", every request of a limited key gets
// vkey.StoreDown (the gateway's 503). One operation per
// Options.RetryInterval tries Redis again, as the State does; the first
// that succeeds ends the fallback.
type Limiter struct {
	s      *State
	local  *vkey.Local
	onDown func() string
	wg     sync.WaitGroup // settlements in flight
}

// LimiterOptions configure a Limiter.
type LimiterOptions struct {
	Options
	// OnDown returns the key set's on_store_down (vkey.StoreDownLocal,
	// vkey.StoreDownRefuse); nil is local.
	OnDown func() string
}

var _ vkey.Limiter = (*Limiter)(nil)

// OpenLimiter connects to the Redis at url (see [Open] for its forms).
func OpenLimiter(url string, o LimiterOptions) (*Limiter, error) {
	t, err := parseURL(url)
	if err != nil {
		return nil, err
	}
	s, err := openOwned(t, o.Options)
	if err != nil {
		return nil, err
	}
	return &Limiter{s: s, local: vkey.NewLocal(), onDown: o.OnDown}, nil
}

// NewLimiter returns a Limiter on client, which the caller keeps and
// closes.
func NewLimiter(client goredis.UniversalClient, o LimiterOptions) (*Limiter, error) {
	s, err := New(client, o.Options)
	if err != nil {
		return nil, err
	}
	return &Limiter{s: s, local: vkey.NewLocal(), onDown: o.OnDown}, nil
}

// Close waits for the settlements in flight, then closes the client if
// OpenLimiter made it.
func (l *Limiter) Close() error {
	l.wg.Wait()
	return l.s.Close()
}

// Stats returns the Limiter's counters (as the State's).
func (l *Limiter) Stats() Stats { return l.s.Stats() }

// The limiter's keys: a key's GCRA times, and its budgets' counters per
// period.
func (l *Limiter) keysOf(k *vkey.Key, now time.Time) (keys []string, dayTTL, monthTTL int64) {
	day, month, dayEnd, monthEnd := vkey.Period(now)
	id := l.s.tag + "vk:" + k.ID
	keys = []string{id + ":r", id + ":t", id + ":d" + strconv.FormatInt(day, 10), id + ":m" + strconv.FormatInt(month, 10)}
	// A period's counter outlives its period by an hour, for the clocks
	// of the replicas that name the period.
	return keys, ms(dayEnd.Sub(now) + time.Hour), ms(monthEnd.Sub(now) + time.Hour)
}

// admitScript: KEYS the request and token GCRA times, the day's and the
// month's counters; ARGV rpm, tpm, cost, day and month budgets, the
// counters' TTLs (ms). Times are µs on Redis's clock. It returns the
// vkey.Reason, the wait (µs), the requests remaining and their reset
// (µs), the tokens remaining and their reset.
var admitScript = goredis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local W = 60000000
local rpm, tpm, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local dl, ml = tonumber(ARGV[4]), tonumber(ARGV[5])
if dl > 0 and tonumber(redis.call('GET', KEYS[3]) or '0') >= dl then return {3, 0, 0, 0, 0, 0} end
if ml > 0 and tonumber(redis.call('GET', KEYS[4]) or '0') >= ml then return {3, 1, 0, 0, 0, 0} end
local remR, resetR, remT, resetT = 0, 0, 0, 0
local newR, newT
if rpm > 0 then
  local T = math.max(math.floor(W / rpm), 1)
  local at = math.max(tonumber(redis.call('GET', KEYS[1]) or '0'), now)
  local nx = at + T
  if nx - W > now then return {1, nx - W - now, math.floor((now + W - at) / T), at - now, 0, 0} end
  newR, remR, resetR = nx, math.floor((now + W - nx) / T), nx - now
end
if tpm > 0 then
  local T = math.max(math.floor(W / tpm), 1)
  local at = math.max(tonumber(redis.call('GET', KEYS[2]) or '0'), now)
  local nx = at + cost * T
  if nx - W > now then return {2, nx - W - now, remR, resetR, math.floor((now + W - at) / T), at - now} end
  newT, remT, resetT = nx, math.floor((now + W - nx) / T), nx - now
end
if newR then redis.call('SET', KEYS[1], string.format('%.0f', newR), 'PX', math.ceil((newR - now) / 1000) + 1) end
if newT then redis.call('SET', KEYS[2], string.format('%.0f', newT), 'PX', math.ceil((newT - now) / 1000) + 1) end
if dl > 0 then redis.call('INCRBY', KEYS[3], cost); redis.call('PEXPIRE', KEYS[3], ARGV[6]) end
if ml > 0 then redis.call('INCRBY', KEYS[4], cost); redis.call('PEXPIRE', KEYS[4], ARGV[7]) end
return {0, 0, remR, resetR, remT, resetT}
`)

// settleScript: KEYS as admitScript's but the first; ARGV the tokens'
// delta, tpm, day and month budgets, the counters' TTLs (ms).
var settleScript = goredis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local d, tpm = tonumber(ARGV[1]), tonumber(ARGV[2])
if tpm > 0 then
  local T = math.max(math.floor(60000000 / tpm), 1)
  local nx = tonumber(redis.call('GET', KEYS[1]) or '0') + d * T
  if nx > now then
    redis.call('SET', KEYS[1], string.format('%.0f', nx), 'PX', math.ceil((nx - now) / 1000) + 1)
  else
    redis.call('DEL', KEYS[1])
  end
end
for i, lim in ipairs({tonumber(ARGV[3]), tonumber(ARGV[4])}) do
  if lim > 0 then
    if redis.call('INCRBY', KEYS[i + 1], d) < 0 then redis.call('SET', KEYS[i + 1], 0) end
    redis.call('PEXPIRE', KEYS[i + 1], ARGV[4 + i])
  end
end
return 0
`)

func (l *Limiter) refuse() bool {
	return l.onDown != nil && l.onDown() == vkey.StoreDownRefuse
}

// Admit implements [vkey.Limiter] in one round trip.
func (l *Limiter) Admit(ctx context.Context, k *vkey.Key, est int64, now time.Time) vkey.Decision {
	if !k.Limited() {
		return vkey.Decision{Requests: k.RPM, Tokens: k.TPM}
	}
	cost := vkey.Cost(k, est)
	epoch, try := l.s.tryStore()
	if try {
		keys, dayTTL, monthTTL := l.keysOf(k, now)
		octx, cancel := l.s.opCtx(ctx)
		v, err := admitScript.Run(octx, l.s.c, keys, k.RPM, k.TPM, cost, k.Budget.TokensPerDay, k.Budget.TokensPerMonth, dayTTL, monthTTL).Int64Slice()
		cancel()
		if l.s.done(octx, epoch, err) && len(v) == 6 {
			d := vkey.Decision{Reason: vkey.Reason(v[0]), Requests: k.RPM, Tokens: k.TPM,
				RetryAfter:        time.Duration(v[1]) * time.Microsecond,
				RemainingRequests: v[2], ResetRequests: time.Duration(v[3]) * time.Microsecond,
				RemainingTokens: v[4], ResetTokens: time.Duration(v[5]) * time.Microsecond}
			if d.Reason == vkey.OverBudget {
				_, _, dayEnd, monthEnd := vkey.Period(now)
				d.RetryAfter = dayEnd.Sub(now)
				if v[1] == 1 {
					d.RetryAfter = monthEnd.Sub(now)
				}
			}
			return d
		}
	}
	l.s.fallback()
	if l.refuse() {
		return vkey.Decision{Reason: vkey.StoreDown, Requests: k.RPM, Tokens: k.TPM, RetryAfter: l.s.o.RetryInterval}
	}
	return l.local.Admit(ctx, k, est, now)
}

// Settle implements [vkey.Limiter]: the script runs after the request,
// in a goroutine of its own (Close waits for it).
func (l *Limiter) Settle(ctx context.Context, k *vkey.Key, delta int64, now time.Time) {
	if !k.Limited() || delta == 0 {
		return
	}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		epoch, try := l.s.tryStore()
		if try {
			keys, dayTTL, monthTTL := l.keysOf(k, now)
			octx, cancel := l.s.opCtx(context.WithoutCancel(ctx))
			err := settleScript.Run(octx, l.s.c, keys[1:], delta, k.TPM, k.Budget.TokensPerDay, k.Budget.TokensPerMonth, dayTTL, monthTTL).Err()
			cancel()
			if l.s.done(octx, epoch, err) {
				return
			}
		}
		l.s.fallback()
		l.local.Settle(ctx, k, delta, now)
	}()
}
