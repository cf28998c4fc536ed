package gateway

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
)

// attemptRec is one attempt of a request as its access log and its
// stream's trail comment tell it: no prompt or output text.
type attemptRec struct {
	model    string // the policy's name of the model it ran on
	outcome  driver.AttemptOutcome
	class    abi.ErrorClass // for a failed or truncated attempt
	status   int            // the upstream's HTTP status of a provider error; 0 otherwise
	duration time.Duration
}

// trail is a request's attempts in the order they ended, over every link
// of its chain (the request's own fallbacks) and its continuations. The
// driver ends a hedge's losers on goroutines of their own, hence the lock.
type trail struct {
	mu    sync.Mutex
	recs  []attemptRec
	first [2]attemptRec // recs' array for the common request, inside the call's one allocation
}

func (t *trail) add(r attemptRec) {
	t.mu.Lock()
	if t.recs == nil {
		t.recs = t.first[:0]
	}
	t.recs = append(t.recs, r)
	t.mu.Unlock()
}

// each calls f with each attempt, in order, under the lock.
func (t *trail) each(f func(n int, r *attemptRec)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := range t.recs {
		f(i+1, &t.recs[i])
	}
}

// callKey finds a request's *call in the contexts below the gateway
// (callCtx answers it), for the observer's attempt records.
type callKey struct{}

// recordAttempt adds the attempt e ended to the trail of the request ctx
// belongs to (none: a context that is not a gateway request's).
func recordAttempt(ctx context.Context, e *driver.AttemptEndEvent) {
	c, ok := ctx.Value(callKey{}).(*call)
	if !ok || c.gen == nil {
		return
	}
	r := attemptRec{model: c.gen.name(e.Model), outcome: e.Outcome, status: e.Status, duration: e.Duration}
	if e.Outcome == driver.AttemptFailed || e.Outcome == driver.AttemptTruncated {
		r.class = e.Class
	}
	c.l.trail.add(r)
}

// appendTrail appends the SSE comment line that ends every stream the
// gateway relays (clients skip comments): the attempts the answer took,
// over its fallbacks and continuations, as one JSON object after
// ": retryhost ":
//
//	: retryhost {"attempts":[{"model":"primary","outcome":"failed","class":"overloaded","status":503,"ms":3},{"model":"backup","outcome":"success","ms":41}]}
//
// outcome is success, failed (it failed before any of it reached the
// client), rejected (a rule rejected its answer) or truncated (it failed
// after commit: continued by the next attempt, or the stream's in-band
// error); class and status are a failed attempt's. The attempt still
// under way when the stream ends (a client gone) is not in it.
func appendTrail(b []byte, t *trail) []byte {
	b = append(b, `: retryhost {"attempts":[`...)
	t.each(func(n int, r *attemptRec) {
		if n > 1 {
			b = append(b, ',')
		}
		b = append(b, `{"model":`...)
		b = appendJSONString(b, r.model)
		b = append(b, `,"outcome":"`...)
		b = append(b, outcomeName(r.outcome)...)
		b = append(b, '"')
		if r.class != abi.ClassNone {
			b = append(b, `,"class":`...)
			b = appendJSONString(b, r.class.String())
		}
		if r.status != 0 {
			b = append(b, `,"status":`...)
			b = strconv.AppendInt(b, int64(r.status), 10)
		}
		b = append(b, `,"ms":`...)
		b = strconv.AppendInt(b, r.duration.Milliseconds(), 10)
		b = append(b, '}')
	})
	return append(b, "]}\n\n"...)
}

// logAttempts writes one access-log record ("msg":"attempt") per attempt
// of the request l logs, before its "request" record: the request's id
// and request_id, the attempt's number over the whole request, its model,
// outcome, error class, upstream status and duration.
func logAttempts(ctx context.Context, h slog.Handler, r *http.Request, l *accessLog) {
	l.trail.each(func(n int, a *attemptRec) {
		rec := slog.NewRecord(time.Now(), slog.LevelInfo, "attempt", 0)
		class := ""
		if a.class != abi.ClassNone {
			class = a.class.String()
		}
		rec.AddAttrs(
			slog.String("id", l.id), slog.String("request_id", l.requestID), slog.String("path", r.URL.Path),
			slog.Int("attempt", n), slog.String("model", a.model), slog.String("outcome", outcomeName(a.outcome)),
			slog.String("error_class", class), slog.Int("status", a.status), slog.Duration("duration", a.duration))
		_ = h.Handle(ctx, rec)
	})
}

// outcomeName names an attempt's outcome in the trail and the access log:
// driver.AttemptOutcome's names, but "failed" for AttemptFailed, so that
// a stream's trail never reads as the "error" of an error event.
func outcomeName(o driver.AttemptOutcome) string {
	if o == driver.AttemptFailed {
		return "failed"
	}
	return o.String()
}
