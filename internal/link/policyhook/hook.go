// Package policyhook lets the scenario replays build a policy embedded in a
// larger document, with errors positioned in that document, without package
// policy exporting its decoder's types.
package policyhook

// Build is set by package policy to its
// func(ctx context.Context, doc *strict.Doc, f *policy.File, prefix string, opts policy.Options) (*policy.Policy, error).
var Build any
