package redis

import (
	"context"
	"errors"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Limiter keeps clients' request and token rates and their token and
// spend budgets on Redis, for a whole fleet: an admission is one script
// (one round trip) that checks the day's and the month's budgets and takes
// from the RPM and TPM (GCRA over a minute, on Redis's clock), atomically;
// a settlement, another, adds a request's tokens beyond its estimate and
// its cost (INCRBYFLOAT) once it is over. It knows
// nothing of keys or of what to do while Redis is down: the gateway's
// virtual keys build on it (gateway/vkey's Redis limiter), answering in
// process when an operation returns ErrUnavailable.
//
// An operation fails with ErrUnavailable when Redis did not answer within
// Options.OpTimeout, or while it is down, except one operation per
// Options.RetryInterval that tries it again, as the State does; the first
// that succeeds ends the outage. A Limiter is safe for concurrent use.
type Limiter struct {
	s *State
}

// ErrUnavailable is a Limiter operation Redis did not answer: the caller
// limits on its own.
var ErrUnavailable = errors.New("redis: limiter store unavailable")

// Limits are one client's rates and budgets; 0 is no limit.
type Limits struct {
	RPM, TPM                     int64
	TokensPerDay, TokensPerMonth int64
	// CostPerDay and CostPerMonth are spend budgets, in the currency of
	// the costs Settle is given.
	CostPerDay, CostPerMonth float64
}

// Period names the budgets' counters: the UTC day and month (numbered
// from 1970) a charge falls in, and when each ends.
type Period struct {
	Day, Month       int64
	DayEnd, MonthEnd time.Time
}

// Refusal is what an admission was refused for.
type Refusal int

const (
	NotRefused Refusal = iota
	RefusedRPM
	RefusedTPM
	RefusedBudget
	// RefusedSpend: the day's or month's spend (cost) budget is spent.
	RefusedSpend
)

// Admission is the answer to Limiter.Admit: a refusal and its wait, and
// what remains of the rates after it and when they are whole again.
type Admission struct {
	Refused Refusal
	// Month: a RefusedBudget or RefusedSpend is the month's budget (else
	// the day's).
	Month                              bool
	Wait                               time.Duration
	RemainingRequests, RemainingTokens int64
	ResetRequests, ResetTokens         time.Duration
}

// OpenLimiter connects to the Redis at url (see [Open] for its forms).
func OpenLimiter(url string, o Options) (*Limiter, error) {
	t, err := parseURL(url)
	if err != nil {
		return nil, err
	}
	s, err := openOwned(t, o)
	if err != nil {
		return nil, err
	}
	return &Limiter{s: s}, nil
}

// NewLimiter returns a Limiter on client, which the caller keeps and
// closes.
func NewLimiter(client goredis.UniversalClient, o Options) (*Limiter, error) {
	s, err := New(client, o)
	if err != nil {
		return nil, err
	}
	return &Limiter{s: s}, nil
}

// Close closes the client if OpenLimiter made it.
func (l *Limiter) Close() error { return l.s.Close() }

// Stats returns the Limiter's counters (as the State's).
func (l *Limiter) Stats() Stats { return l.s.Stats() }

// RetryInterval is how often an operation tries Redis again while it is
// down (Options.RetryInterval).
func (l *Limiter) RetryInterval() time.Duration { return l.s.o.RetryInterval }

// The limiter's keys: a client's GCRA times, its token budgets' counters
// per period, then its spend's.
func (l *Limiter) keysOf(id string, p Period, now time.Time) (keys []string, dayTTL, monthTTL int64) {
	id = l.s.tag + "vk:" + id
	day, month := strconv.FormatInt(p.Day, 10), strconv.FormatInt(p.Month, 10)
	keys = []string{id + ":r", id + ":t", id + ":d" + day, id + ":m" + month, id + ":cd" + day, id + ":cm" + month}
	// A period's counter outlives its period by an hour, for the clocks
	// of the replicas that name the period.
	return keys, ms(p.DayEnd.Sub(now) + time.Hour), ms(p.MonthEnd.Sub(now) + time.Hour)
}

// admitScript: KEYS the request and token GCRA times, the day's and the
// month's token counters, the day's and the month's spend; ARGV rpm, tpm,
// cost (tokens), day and month token budgets, the counters' TTLs (ms),
// day and month spend budgets. Times are µs on Redis's clock. It returns
// the Refusal, the wait (µs; for a budget, 1 when it is the month's), the
// requests remaining and their reset (µs), the tokens remaining and their
// reset.
var admitScript = goredis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local W = 60000000
local rpm, tpm, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local dl, ml = tonumber(ARGV[4]), tonumber(ARGV[5])
if dl > 0 and tonumber(redis.call('GET', KEYS[3]) or '0') >= dl then return {3, 0, 0, 0, 0, 0} end
if ml > 0 and tonumber(redis.call('GET', KEYS[4]) or '0') >= ml then return {3, 1, 0, 0, 0, 0} end
local cdl, cml = tonumber(ARGV[8]), tonumber(ARGV[9])
if cdl > 0 and tonumber(redis.call('GET', KEYS[5]) or '0') >= cdl then return {4, 0, 0, 0, 0, 0} end
if cml > 0 and tonumber(redis.call('GET', KEYS[6]) or '0') >= cml then return {4, 1, 0, 0, 0, 0} end
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
// delta, tpm, day and month token budgets, the counters' TTLs (ms), the
// cost, day and month spend budgets. A spend counter is a float
// (INCRBYFLOAT) that expires an hour after its period, as the others.
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
local c = tonumber(ARGV[7])
if c > 0 then
  for i, lim in ipairs({tonumber(ARGV[8]), tonumber(ARGV[9])}) do
    if lim > 0 then
      redis.call('INCRBYFLOAT', KEYS[i + 3], ARGV[7])
      redis.call('PEXPIRE', KEYS[i + 3], ARGV[4 + i])
    end
  end
end
return 0
`)

// Admit charges client id one request and cost tokens, in period p, when
// every limit has room for them, atomically, and charges nothing
// otherwise. It returns ErrUnavailable when Redis did not answer.
func (l *Limiter) Admit(ctx context.Context, id string, lim Limits, cost int64, p Period, now time.Time) (Admission, error) {
	epoch, try := l.s.tryStore()
	if try {
		keys, dayTTL, monthTTL := l.keysOf(id, p, now)
		octx, cancel := l.s.opCtx(ctx)
		v, err := admitScript.Run(octx, l.s.c, keys, lim.RPM, lim.TPM, cost, lim.TokensPerDay, lim.TokensPerMonth, dayTTL, monthTTL,
			lim.CostPerDay, lim.CostPerMonth).Int64Slice()
		cancel()
		if l.s.done(ctx, epoch, err) && len(v) == 6 {
			a := Admission{Refused: Refusal(v[0]), RemainingRequests: v[2], ResetRequests: time.Duration(v[3]) * time.Microsecond,
				RemainingTokens: v[4], ResetTokens: time.Duration(v[5]) * time.Microsecond}
			if a.Refused == RefusedBudget || a.Refused == RefusedSpend {
				a.Month = v[1] == 1
			} else {
				a.Wait = time.Duration(v[1]) * time.Microsecond
			}
			return a, nil
		}
	}
	l.s.fallback()
	return Admission{}, ErrUnavailable
}

// Settle charges client id delta tokens more in period p (negative: gives
// back what a request did not use), on its TPM and token budgets, and
// cost (not negative) on its spend budgets. It returns ErrUnavailable
// when Redis did not answer.
func (l *Limiter) Settle(ctx context.Context, id string, lim Limits, delta int64, cost float64, p Period, now time.Time) error {
	epoch, try := l.s.tryStore()
	if try {
		keys, dayTTL, monthTTL := l.keysOf(id, p, now)
		octx, cancel := l.s.opCtx(ctx)
		err := settleScript.Run(octx, l.s.c, keys[1:], delta, lim.TPM, lim.TokensPerDay, lim.TokensPerMonth, dayTTL, monthTTL,
			max(cost, 0), lim.CostPerDay, lim.CostPerMonth).Err()
		cancel()
		if l.s.done(ctx, epoch, err) {
			return nil
		}
	}
	l.s.fallback()
	return ErrUnavailable
}
