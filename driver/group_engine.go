package driver

// How a request runs on deployment groups (group.go): the engine's steps
// carry the logical target (a model or a group) apart from the deployment
// an attempt runs on.

// logical returns the model the step targets: its group, or its model.
func (s *step) logical() Model {
	if s.target != nil {
		return s.target
	}
	return s.model
}

// aim makes st target t: on a group, one of its deployments chosen by the
// group's strategy, avoiding those this request tried and those cooling
// down. With strict, it reports false instead of choosing a deployment
// already tried or cooling.
func (q *request) aim(st *step, t Model, strict bool) bool {
	st.target = t
	g, ok := t.(*DeploymentGroup)
	if !ok {
		st.model, st.group, st.idx = t, nil, 0
		return true
	}
	var tried uint64
	for i := range q.records {
		if j := g.index(q.records[i].Model.Key()); j >= 0 {
			tried |= 1 << j
		}
	}
	var cooling uint64
	i := -1
	if q.cooled {
		cooling, i = q.groupCooling(g, tried, q.r.cfg.now())
	}
	if i < 0 {
		i = g.pick(tried, cooling, strict)
	}
	if i < 0 {
		return false
	}
	st.model, st.group, st.idx = g.deps[i], g, i
	return true
}

// depStart counts the attempt that starts as in flight on its deployment.
func (q *request) depStart() {
	if g := q.cur.group; g != nil {
		g.stats[q.cur.idx].inflight.Add(1)
		q.busy, q.fed = true, false
	}
}

// depFed feeds the attempt's time to first content to its group's
// averages, once (the stream driver calls it at commit).
func (q *request) depFed() {
	if q.busy && !q.fed {
		q.fed = true
		q.cur.group.observe(q.cur.idx, true, q.r.cfg.now().Sub(q.attemptAt))
	}
}

// depDone ends the attempt on its deployment: no longer in flight, and a
// success (ok) or a health failure (failed) fed to the averages.
func (q *request) depDone(ok, failed bool) {
	if !q.busy {
		return
	}
	q.busy = false
	g, i := q.cur.group, q.cur.idx
	g.stats[i].inflight.Add(-1)
	if !q.fed && (ok || failed) {
		q.fed = true
		g.observe(i, ok, q.r.cfg.now().Sub(q.attemptAt))
	}
}

// release gives back what the request holds if it ends without succeed or
// final (a panic in the caller's function): deferred by Do and Generate.
func (q *request) release() {
	q.budgetEnd()
	q.depDone(false, false)
}

// failOverInGroup returns the next step of a request whose attempt on a
// group's deployment failed with a health failure: another deployment of
// the group, not yet tried and not cooling down. ok is false when there is
// none (the rules decide) or when the request has no attempt left.
func (q *request) failOverInGroup() (next step, ok bool) {
	g := q.cur.group
	if g == nil || !healthFailure.Matches(q.a) || len(q.records) >= q.r.cfg.maxAttempts {
		return step{}, false
	}
	if !q.budgetAt.IsZero() && !q.r.cfg.now().Before(q.budgetAt) {
		return step{}, false
	}
	next = step{number: len(q.records) + 1, timeout: q.r.cfg.attemptTimeout}
	if !q.aim(&next, g, true) {
		return step{}, false
	}
	return next, true
}
