package gateway

import (
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// WithRequestLog writes one JSON line per request to w: its ids, route,
// the model that answered, status and outcome, the virtual key's id,
// durations, tokens and cost, and its attempt trail (each attempt's model,
// outcome, error class, upstream status, start, duration, time to first
// content, tokens and cost) with the plugin calls it made, counted by
// plugin and operation. No prompt or output text, no header, no key. The
// fields are listed in docs/gateway.md. Lines are written whole, one Write
// each, in the order requests end; w need not be safe for concurrent use.
// Default: none (the access log of WithLogger still says each request's
// totals).
func WithRequestLog(w io.Writer) Option {
	return func(c *config) error {
		if w == nil {
			return errNilWriter
		}
		c.requestLog = &requestLog{w: w}
		return nil
	}
}

// requestLog is WithRequestLog's sink.
type requestLog struct {
	mu sync.Mutex
	w  io.Writer
}

var lineBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1<<10); return &b }}

func (s *requestLog) write(r *http.Request, l *accessLog, keyID string, t *acctTrail, tot *totals, now time.Time) {
	box := lineBufs.Get().(*[]byte)
	b := appendRequestLine((*box)[:0], r, l, keyID, t, tot, now)
	s.mu.Lock()
	_, _ = s.w.Write(b)
	s.mu.Unlock()
	if cap(b) <= maxPooledBuf {
		*box = b[:0]
		lineBufs.Put(box)
	}
}

func appendMs(b []byte, d time.Duration) []byte {
	return strconv.AppendFloat(b, float64(d.Microseconds())/1000, 'f', -1, 64)
}

func appendField(b []byte, name string) []byte {
	b = append(b, ',', '"')
	b = append(b, name...)
	return append(b, '"', ':')
}

func appendStrField(b []byte, name, v string) []byte {
	return appendJSONString(appendField(b, name), v)
}

func appendIntField(b []byte, name string, v int64) []byte {
	return strconv.AppendInt(appendField(b, name), v, 10)
}

// appendRequestLine appends one request's line (see WithRequestLog).
func appendRequestLine(b []byte, r *http.Request, l *accessLog, keyID string, t *acctTrail, tot *totals, now time.Time) []byte {
	b = append(b, `{"time":`...)
	b = appendJSONString(b, now.UTC().Format(time.RFC3339Nano))
	b = appendStrField(b, "id", l.id)
	b = appendStrField(b, "request_id", l.requestID)
	b = appendStrField(b, "method", r.Method)
	b = appendStrField(b, "path", r.URL.Path)
	b = appendStrField(b, "key", keyID)
	b = appendStrField(b, "route", l.route)
	b = appendStrField(b, "model", l.model)
	b = appendField(b, "stream")
	b = strconv.AppendBool(b, l.stream)
	b = appendIntField(b, "status", int64(l.status))
	b = appendStrField(b, "outcome", l.outcome)
	if l.errClass != "" {
		b = appendStrField(b, "error_class", l.errClass)
	}
	b = appendField(b, "duration_ms")
	b = appendMs(b, now.Sub(l.start))
	if l.commitAt > 0 {
		b = appendField(b, "time_to_first_content_ms")
		b = appendMs(b, l.commitAt)
	}
	b = appendIntField(b, "attempts", int64(l.attempts))
	b = appendIntField(b, "fallbacks", int64(l.fallbacks))
	b = appendIntField(b, "failovers", int64(tot.failOvers))
	b = appendIntField(b, "continuations", int64(tot.continuations))
	b = appendUsageFields(b, tot.usage.InputTokens, tot.usage.OutputTokens, tot.usage.CacheReadTokens, tot.usage.CacheWriteTokens)
	b = appendField(b, "cost")
	b = appendCost(b, tot.cost)
	b = append(b, `,"trail":[`...)
	if t != nil {
		t.mu.Lock()
		for i := range t.attempts {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendAttempt(b, &t.attempts[i])
		}
		b = append(b, ']')
		if len(t.plugins) > 0 {
			b = append(b, `,"plugins":[`...)
			for i := range t.plugins {
				if i > 0 {
					b = append(b, ',')
				}
				b = appendPluginRec(b, &t.plugins[i])
			}
			b = append(b, ']')
		}
		t.mu.Unlock()
	} else {
		b = append(b, ']')
	}
	return append(b, "}\n"...)
}

// appendAttempt appends one attempt of a request's trail, as an object.
func appendAttempt(b []byte, a *acctAttempt) []byte {
	b = append(b, `{"n":`...)
	b = strconv.AppendInt(b, int64(a.number), 10)
	b = appendStrField(b, "model", a.model)
	if a.respModel != "" {
		b = appendStrField(b, "response_model", a.respModel)
	}
	outcome := "unfinished" // a hedge's loser still running as the request ends
	if a.ended {
		outcome = a.outcome.String()
	}
	b = appendStrField(b, "outcome", outcome)
	if a.class != "" {
		b = appendStrField(b, "class", a.class)
	}
	if a.status != 0 {
		b = appendIntField(b, "status", int64(a.status))
	}
	b = appendField(b, "start_ms")
	b = appendMs(b, a.start)
	b = appendField(b, "duration_ms")
	b = appendMs(b, a.duration)
	if a.ttfc > 0 {
		b = appendField(b, "time_to_first_content_ms")
		b = appendMs(b, a.ttfc)
	}
	if a.failOver {
		b = append(b, `,"failover":true`...)
	}
	if a.continuation {
		b = append(b, `,"continuation":true`...)
	}
	b = appendUsageFields(b, a.usage.InputTokens, a.usage.OutputTokens, a.usage.CacheReadTokens, a.usage.CacheWriteTokens)
	b = appendField(b, "cost")
	b = appendCost(b, a.cost)
	return append(b, '}')
}

// appendPluginRec appends one plugin's calls in a request, as an object.
func appendPluginRec(b []byte, p *pluginRec) []byte {
	b = append(b, `{"plugin":`...)
	b = appendJSONString(b, p.plugin)
	b = appendStrField(b, "op", p.op)
	b = appendIntField(b, "calls", int64(p.calls))
	b = appendIntField(b, "failures", int64(p.failures))
	if p.failure != "" {
		b = appendStrField(b, "failure", p.failure)
	}
	b = appendField(b, "duration_ms")
	b = appendMs(b, p.duration)
	return append(b, '}')
}

func appendUsageFields(b []byte, in, out, cached, written int64) []byte {
	b = appendIntField(b, "input_tokens", in)
	b = appendIntField(b, "output_tokens", out)
	b = appendIntField(b, "cached_input_tokens", cached)
	return appendIntField(b, "cache_write_tokens", written)
}
