package policy

// needsStream reports whether the file needs a streamed upstream for a
// request that commits at its end: a transform reads an answer's deltas
// as they come, and a first-content or gap deadline and a hedge time them,
// which a non-streamed answer, whole at once, would turn into bounds on
// the whole answer.
func (b *builder) needsStream(f *File) bool {
	if len(f.Transforms) > 0 || f.Deadlines.FirstContent != nil || f.Deadlines.Gap != nil || f.Hedge != nil {
		return true
	}
	// The default hedge, on the terms hedge gives it.
	if b.opts.DefaultHedge <= 0 || b.doc.Has(b.path("hedge")) {
		return false
	}
	rules := f.Rules
	if d := b.opts.DefaultRules; d != nil && !b.doc.Has(b.path("rules")) {
		names := make([]string, len(f.Models))
		for i, m := range f.Models {
			names[i] = m.Name
		}
		rules = d(names)
	}
	return hedgesByDefault(f, rules)
}

// defaultUpstreamJSON reports whether the model at models[i] gets
// Options.DefaultUpstreamJSON: the file allows it, the model gives no
// "upstream_json" of its own, and its provider and API can take it.
func (b *builder) defaultUpstreamJSON(at string, m *ModelSpec, kind providerKind) bool {
	return b.upJSON && !b.doc.Has(b.path(at+".upstream_json")) && kind.adapter == openaiPkg && m.API != "responses"
}
