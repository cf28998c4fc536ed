package driver

// Hedging on first content: the stream driver's loop when
// WithHedge is on. Attempts run on goroutines of their own; every decision
// (the rules, the budget, the records, the callbacks) stays on the
// caller's goroutine, which owns the request's state, so the engine's
// single-goroutine contract holds. The engine's per-attempt fields (cur,
// attemptAt, deadline, retrySlot, busy, fed, the observer's attempt
// context) are saved in a flight while its attempt runs and loaded back
// when its result is handled.
// RetryableModel.Generate uses the same loop: an attempt is a whole call,
// and the first complete response (through the transform chain) wins.
//
// TODO(hedging): Runner.Do and Runner.Generate (no RetryableModel) are not
// hedged (policy files take "hedge" for the RetryableModel).

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/retryhost/retryhost/abi"
)

// ErrHedgeLost is the cause of the context of an attempt that another
// attempt of the same request beat to commit (see [WithHedge]): its
// upstream is closed at once. Observers see it as the Err of that
// attempt's AttemptEnd event; it never reaches the caller.
var ErrHedgeLost = errors.New("retryhost: hedged attempt lost to a faster one")

// WithHedge turns on hedging on first content: when the latest attempt of
// a stream has sent no first content after `after`, the next candidate
// starts in parallel, without cancelling the running attempt; the first
// attempt to commit wins and every other is cancelled at once (its
// upstream closed, with cause [ErrHedgeLost]), so the caller sees exactly
// one preamble and one answer. At most max hedges start per request.
//
// The next candidate is what the rules would run next if the latest
// attempt had just failed with its first-content deadline (a
// *DeadlineError for abi.DeadlineFirstContent, class timeout), counting
// every attempt in flight as made: in a deployment group, the next
// deployment not yet tried and not cooling down; otherwise the first rule
// that matches that failure and has attempts left. Its backoff is not
// waited (a hedge is about time) and OnRetry does not fire for it; when no
// rule matches, no hedge starts. A hedge counts against the request's
// attempt caps ([WithMaxAttempts], a rule's attempts) and takes a slot of
// the retry budget ([WithRetryBudget]): when the budget is spent, no hedge
// starts.
//
// An attempt that fails before commit while another runs is handled by
// the rules as usual (recorded, OnError, cooldowns); what they choose
// starts after its backoff while the other keeps running. When no rule
// matches, the request waits for the attempts still running. The caller's
// cancellation and the total deadline stop every attempt. Exactly one
// outcome callback fires per request, as without hedging.
//
// [RetryableModel.Generate] is hedged the same way, on the first complete
// response: when a call has not answered after `after`, the next candidate
// is called in parallel, the first response (through the transform chain)
// wins and the other calls' contexts are cancelled with [ErrHedgeLost].
//
// after must be positive and max at least 1. Default: off (max 0): a hedge
// adds upstream requests, which only the user can weigh (docs/decisions.md,
// "Why does a hedge start what a first-content timeout would, and why is it
// off by default?").
func WithHedge(after time.Duration, max int) StreamOption {
	return func(c *streamConfig) error {
		if after <= 0 {
			return fmt.Errorf("retryhost: hedge delay %v is not positive", after)
		}
		if max < 1 {
			return fmt.Errorf("retryhost: hedge count %d is less than 1", max)
		}
		c.hedgeAfter, c.hedgeMax = after, max
		return nil
	}
}

// flight is one attempt running on its own goroutine, with the engine's
// per-attempt state saved while it runs.
type flight struct {
	st              step
	at              time.Time
	deadline        *DeadlineError
	slot, busy, fed bool
	aoctx           context.Context
	aopen           bool

	actx   context.Context // from attemptContext
	cancel context.CancelFunc
	stop   context.CancelCauseFunc // ends the attempt early (a lost hedge)
}

type flightResult struct {
	f    *flight
	res  attemptResult
	resp *Response // a call's answer (res.err nil)
}

// pendingStep is an attempt the rules chose after a failure while another
// attempt was running: it starts at due.
type pendingStep struct {
	st   step
	slot bool
	due  time.Time
}

type hedger struct {
	m       *RetryableModel
	q       *request
	ctx     context.Context
	req     *Request
	results chan flightResult
	call    bool // Generate: attempts are calls, the first complete response wins
	atEnd   bool // a stream that commits at its end (CommitAtEnd): the first whole answer wins
	check   func(ctx context.Context, c *Call, resp *Response) (*Response, error)
	running []*flight
	pending []pendingStep
	hedges  int

	// The hedge timer: gen is the current arm's generation (the loop's
	// alone); fired is the highest generation whose timer has fired, kept
	// by an atomic maximum so a stale fire (a timer stopped just as it
	// fired) can neither pass for the current one nor hide it; fire wakes
	// the loop, coalescing wake-ups, so no fire is ever dropped.
	gen   uint64
	took  uint64 // the generation whose fire the loop has acted on
	fired atomic.Uint64
	fire  chan struct{}
	t     stopper
}

// streamHedged is Stream's loop with hedging on (see WithHedge).
func (m *RetryableModel) streamHedged(ctx context.Context, q *request, st step, req *Request) (Stream, error) {
	h := &hedger{m: m, q: q, ctx: ctx, req: req, atEnd: CommitsAtEnd(ctx), results: make(chan flightResult), fire: make(chan struct{}, 1)}
	s, _, err := h.run(st)
	return s, err
}

// generateHedged is Generate's loop with hedging on: the first complete
// response (through check, the transform chain) wins.
func (m *RetryableModel) generateHedged(ctx context.Context, req *Request,
	check func(ctx context.Context, c *Call, resp *Response) (*Response, error)) (*Response, error) {
	if req == nil {
		return nil, errors.New("retryhost: Generate needs a request")
	}
	if d := m.r.cfg.disabled; d != nil && d() {
		return m.r.generate(ctx, req, check) // not hedged: as without WithHedge
	}
	q := &request{op: opGenerate}
	st := q.start(ctx, m.r)
	h := &hedger{m: m, q: q, ctx: ctx, req: req, check: check, call: true,
		results: make(chan flightResult), fire: make(chan struct{}, 1)}
	_, resp, err := h.run(st)
	return resp, err
}

// run runs the request from st until an answer or its final error.
func (h *hedger) run(st step) (Stream, *Response, error) {
	q, ctx := h.q, h.ctx
	defer h.stopTimer()
	h.launch(st)
	var lastStop error
	for {
		if len(h.running) == 0 {
			if len(h.pending) == 0 {
				return nil, nil, q.final(ctx, lastStop)
			}
			// Nothing runs: wait for the next chosen attempt as the
			// sequential loop does (on the caller's ctx, with OnRetry).
			p := h.pending[0]
			h.pending = h.pending[1:]
			p.st.delay = max(0, p.due.Sub(time.Now()))
			q.retrySlot = p.slot
			if final := q.advance(ctx, &p.st); final != nil {
				h.dropPending()
				return nil, nil, final
			}
			h.launch(p.st)
			continue
		}
		var due <-chan time.Time
		var dt *time.Timer
		if len(h.pending) > 0 {
			dt = time.NewTimer(time.Until(h.pending[0].due))
			due = dt.C
		}
		r, fired, ok := h.wait(due)
		if dt != nil {
			dt.Stop()
		}
		switch {
		case fired:
			h.hedge()
		case !ok:
			p := h.pending[0]
			h.pending = h.pending[1:]
			q.retrySlot = p.slot
			p.st.delay = 0
			if final := q.advance(ctx, &p.st); final != nil {
				h.stopAll(causeOf(ctx))
				return nil, nil, final
			}
			h.launch(p.st)
		default:
			h.remove(r.f)
			h.load(r.f)
			if r.res.err == nil {
				s, resp, err, again := h.committed(r)
				if !again {
					return s, resp, err
				}
				continue
			}
			err := q.attemptErr(r.f.actx, r.res.err)
			r.f.end()
			next, ok, stop, hard := h.fail(err)
			switch {
			case ok && len(h.running) == 0 && len(h.pending) == 0:
				if final := q.advance(ctx, &next); final != nil {
					return nil, nil, final
				}
				h.launch(next)
			case ok:
				h.pending = append(h.pending, pendingStep{st: next, slot: q.retrySlot, due: time.Now().Add(next.delay)})
				q.retrySlot = false
				slices.SortStableFunc(h.pending, func(a, b pendingStep) int { return a.due.Compare(b.due) })
			case hard:
				h.stopAll(stop)
				return nil, nil, q.final(ctx, stop)
			default:
				lastStop = stop
			}
		}
	}
}

// wait waits for a result (ok), the current hedge timer (fired) or due.
func (h *hedger) wait(due <-chan time.Time) (r flightResult, fired, ok bool) {
	for {
		select {
		case <-h.fire:
			if h.fired.Load() >= h.gen && h.took < h.gen { // once per arm
				h.took = h.gen
				return r, true, true
			}
		case <-due:
			return r, false, false
		case r = <-h.results:
			return r, false, true
		}
	}
}

// launch starts st on a goroutine of its own and arms the hedge timer.
func (h *hedger) launch(st step) {
	q := h.q
	actx, cancel := q.attemptContext(h.ctx, &st)
	c := q.call()
	sp := &attemptSpec{
		model: c.Model, req: c.Request(h.req), number: c.Number,
		transformers: h.m.cfg.transformers, commit: h.m.cfg.commit,
		firstContent: h.m.cfg.firstContent, gap: h.m.cfg.gap, clock: h.m.cfg.clock,
		atEnd: h.atEnd, maxAnswer: h.m.cfg.maxAnswer, emptyFails: h.m.cfg.emptyFails,
	}
	hctx, stop := context.WithCancelCause(actx)
	f := &flight{st: q.cur, at: q.attemptAt, deadline: q.deadline, slot: q.retrySlot, busy: q.busy, fed: q.fed,
		actx: actx, cancel: cancel, stop: stop}
	q.retrySlot, q.busy = false, false
	if q.obs != nil {
		f.aoctx, f.aopen = q.obs.aoctx, q.obs.aopen
		q.obs.aopen = false
	}
	h.running = append(h.running, f)
	results := h.results // stopAll gives later flights a fresh channel
	if h.call {
		cc, creq := *c, c.Request(h.req)
		go func() {
			resp, err := h.runCall(hctx, &cc, creq)
			results <- flightResult{f: f, res: attemptResult{err: err}, resp: resp}
		}()
	} else {
		go func() { results <- flightResult{f: f, res: runAttempt(hctx, sp)} }()
	}
	h.armTimer()
}

// runCall runs one attempt of a call on its own goroutine: a panic of the
// model or the check is the attempt's error, since no caller could catch it.
func (h *hedger) runCall(ctx context.Context, c *Call, req *Request) (resp *Response, err error) {
	defer func() {
		if p := recover(); p != nil {
			resp, err = nil, fmt.Errorf("retryhost: model %s panicked: %v", c.Model.Key(), p)
		}
	}()
	resp, err = c.Model.Generate(ctx, req)
	if err == nil && resp == nil {
		err = fmt.Errorf("retryhost: %s returned neither a response nor an error", c.Model.Key())
	}
	if err == nil && h.check != nil {
		if resp, err = h.check(ctx, c, resp); err == nil && resp == nil {
			err = fmt.Errorf("retryhost: the response check of %s returned nothing", c.Model.Key())
		}
	}
	if err != nil {
		resp = nil
	}
	return resp, err
}

// load makes f the request's current attempt.
func (h *hedger) load(f *flight) {
	q := h.q
	q.cur, q.attemptAt, q.deadline = f.st, f.at, f.deadline
	q.retrySlot, q.busy, q.fed = f.slot, f.busy, f.fed
	if q.obs != nil {
		q.obs.aoctx, q.obs.aopen = f.aoctx, f.aopen
	}
}

// end releases f's contexts: the hedge's and the attempt's.
func (f *flight) end() {
	f.stop(errAttemptOver)
	f.cancel()
}

func (h *hedger) remove(f *flight) {
	if i := slices.Index(h.running, f); i >= 0 {
		h.running = slices.Delete(h.running, i, i+1)
	}
}

func (h *hedger) armTimer() {
	if h.hedges >= h.m.cfg.hedgeMax {
		return
	}
	h.stopTimer()
	h.gen++
	g := h.gen
	h.t = h.m.cfg.clock.AfterFunc(h.m.cfg.hedgeAfter, func() {
		for {
			f := h.fired.Load()
			if f >= g || h.fired.CompareAndSwap(f, g) {
				break
			}
		}
		select {
		case h.fire <- struct{}{}:
		default: // a wake-up is pending already; the loop reads fired then
		}
	})
}

func (h *hedger) stopTimer() {
	if h.t != nil {
		h.t.Stop()
		h.t = nil
	}
}

// hedge starts the next candidate beside the latest running attempt.
func (h *hedger) hedge() {
	if h.hedges >= h.m.cfg.hedgeMax || len(h.running) == 0 || h.ctx.Err() != nil {
		return
	}
	next, ok := h.candidate(h.running[len(h.running)-1])
	if !ok {
		return
	}
	h.hedges++
	next.delay = 0
	h.launch(next)
}

// candidate asks the rules what they would run if f had failed with its
// first-content deadline, with every attempt in flight counted as made.
// Nothing of the hypothetical stays: the records, the counts and the
// judged attempt are restored; only a budget slot taken for the hedge
// stays (in q.retrySlot, which launch moves to the hedge's flight).
func (h *hedger) candidate(f *flight) (step, bool) {
	q := h.q
	n := len(q.records)
	counts := slices.Clone(q.counts)
	var saved *abi.Attempt
	if q.a != nil {
		a := *q.a
		saved = &a
	}
	q.cur, q.attemptAt, q.retrySlot, q.busy = f.st, f.at, false, false
	for _, o := range h.running {
		q.records = append(q.records, AttemptRecord{Number: o.st.number, Model: o.st.model})
		q.count(o.st.logical().Key()).attempts++
	}
	if q.a == nil {
		q.a = new(abi.Attempt)
	}
	now := q.r.cfg.now()
	de := &DeadlineError{Deadline: abi.DeadlineFirstContent, Limit: h.m.cfg.hedgeAfter}
	*q.a = abi.Attempt{Number: f.st.number, Model: f.st.model.Key(), Elapsed: now.Sub(q.begun), Duration: now.Sub(f.at)}
	classify(de, q.a, now, q.r.cfg.retryAfterCap)
	next, ok := q.failOverInGroup()
	if ok {
		ok = q.budgetTake()
	} else {
		next, ok, _ = q.choose(h.ctx)
	}
	q.records = q.records[:n]
	q.counts = counts
	if saved != nil {
		*q.a = *saved
	}
	return next, ok
}

// fail handles the failure of the loaded attempt as the engine's fail
// does, without ending the request: stop is why no next attempt runs, and
// hard reports a stop that ends every attempt (the caller's cancellation,
// the total deadline). Attempts in flight count against the caps.
func (h *hedger) fail(err error) (next step, ok bool, stop error, hard bool) {
	q, ctx := h.q, h.ctx
	q.record(err, FinishReason{}, Usage{})
	if f := q.r.cfg.onError; f != nil {
		f(ctx, q.a)
	}
	if ctx.Err() != nil {
		return step{}, false, causeOf(ctx), true
	}
	q.coolFailed(ctx, q.a, q.r.cfg.now())
	var de *DeadlineError
	if errors.As(err, &de) && !de.Recoverable() {
		return step{}, false, de, true
	}
	// The attempts in flight count as made: placeholders before the
	// failed attempt's record, which must stay last (choose keeps the
	// conditions' errors in the last record).
	n := len(q.records) - 1
	rec := q.records[n]
	q.records = q.records[:n]
	for _, o := range h.running {
		q.records = append(q.records, AttemptRecord{Number: o.st.number, Model: o.st.model})
		q.count(o.st.logical().Key()).attempts++
	}
	q.records = append(q.records, rec)
	if next, ok = q.failOverInGroup(); ok {
		if !q.budgetTake() {
			ok, stop = false, ErrBudgetExhausted
		}
	} else {
		next, ok, stop = q.choose(ctx)
	}
	rec = q.records[len(q.records)-1]
	q.records = append(q.records[:n], rec)
	for _, o := range h.running {
		q.count(o.st.logical().Key()).attempts--
	}
	if q.obs != nil && (ok || len(h.running) > 0) {
		var np *step
		if ok {
			np = &next
		}
		q.observeEnd(AttemptFailed, err, np)
	}
	return next, ok, stop, false
}

// committed handles a committed attempt (loaded): every other attempt is
// cancelled at once, and the stream goes to the caller as without
// hedging. again reports an empty answer the rules rejected: the loop
// goes on with the attempt they chose.
func (h *hedger) committed(r flightResult) (s Stream, resp *Response, err error, again bool) {
	q, ctx := h.q, h.ctx
	h.stopAll(ErrHedgeLost)
	res := r.res
	if resp = r.resp; resp != nil {
		r.f.end()
		if q.obs != nil {
			q.observeResult(resp.Finish, resp.Usage)
			q.obs.respModel = resp.Meta.ModelID
		}
		next, retry, final := q.judge(ctx, resp.Finish, resp.Usage)
		if final != nil {
			return nil, nil, final, false
		}
		if !retry {
			q.succeed(ctx)
			return nil, resp, nil, false
		}
		if final = q.advance(ctx, &next); final != nil {
			return nil, nil, final, false
		}
		h.launch(next)
		return nil, nil, nil, true
	}
	if !res.empty && !res.whole {
		return h.m.commit(ctx, q, h.req, res, r.f.end), nil, nil, false
	}
	var fin Finish
	if res.finish != nil {
		fin = *res.finish
	}
	next, retry, final := q.judge(ctx, fin.Reason, fin.Usage)
	if final == nil && !retry {
		return h.m.commit(ctx, q, h.req, res, r.f.end), nil, nil, false
	}
	_ = res.stream.Close() // rejected: discarded unseen
	r.f.end()
	if final != nil {
		return nil, nil, final, false
	}
	if final = q.advance(ctx, &next); final != nil {
		return nil, nil, final, false
	}
	h.launch(next)
	return nil, nil, nil, true
}

// stopAll cancels every running attempt with cause and drops the pending
// ones: their deployment and budget counts are given back at once, their
// observer spans end, and a goroutine waits for their results (closing a
// stream that committed meanwhile) so that none is left behind.
func (h *hedger) stopAll(cause error) {
	h.stopTimer()
	h.dropPending()
	if len(h.running) == 0 {
		return
	}
	q := h.q
	fs := h.running
	h.running = nil
	for _, f := range fs {
		f.stop(cause)
		if f.busy {
			f.st.group.stats[f.st.idx].inflight.Add(-1)
		}
		if f.slot {
			q.retryEnded()
		}
		if q.obs != nil && f.aopen {
			q.obs.o.AttemptEnd(f.aoctx, AttemptEndEvent{Model: f.st.model, Number: f.st.number, Outcome: AttemptFailed, Err: cause})
		}
	}
	results := h.results
	h.results = make(chan flightResult) // the loop may go on (an empty answer rejected)
	go func() {
		for range fs {
			r := <-results
			if r.res.stream != nil {
				_ = r.res.stream.Close()
			}
			r.f.end()
		}
	}()
}

func (h *hedger) dropPending() {
	for _, p := range h.pending {
		if p.slot {
			h.q.retryEnded()
		}
	}
	h.pending = nil
}
