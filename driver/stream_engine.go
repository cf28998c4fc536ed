package driver

import "context"

// failCommitted ends a request whose committed stream failed after commit:
// nothing may re-run (the caller has the output), so no rule is asked; the
// attempt is recorded and OnFailure fires once with err, which the caller
// already got from Recv. It is the one method the stream driver adds to the
// call engine's per-request state.
func (q *request) failCommitted(ctx context.Context, err error) {
	q.budgetEnd()
	q.depDone(false, false)
	if q.disabled {
		if q.obs != nil {
			q.record(err, FinishReason{}, Usage{})
			q.observeFinal(err)
		}
		return
	}
	q.record(err, FinishReason{}, Usage{})
	if f := q.r.cfg.onFailure; f != nil {
		f(ctx, Outcome{Model: q.cur.model, Attempts: q.records, Err: err, Elapsed: q.r.cfg.now().Sub(q.begun)})
	}
	if q.obs != nil {
		q.observeFinal(err)
	}
}
