package policy

import "fmt"

// EmbeddingSpec declares a model an embedding model and names its vector
// space. A gateway's POST /v1/embeddings fails over within a group only
// between models of one space, and the loader refuses a group whose models
// declare different ones: vectors of two spaces mixed in one index match
// nothing they should, silently.
type EmbeddingSpec struct {
	// Dimensions is the length of the model's vectors at full size
	// (1536 for text-embedding-3-small). Required, positive.
	Dimensions int `json:"dimensions"`
	// Family names the vector space: models of one family embed alike
	// (one model served by several deployments or providers), such as
	// "text-embedding-3-small". Required.
	Family string `json:"family"`
}

// Embedding returns the embedding declaration of the model or group name
// (a group's is its models' common one), and false when it has none.
func (p *Policy) Embedding(name string) (EmbeddingSpec, bool) {
	e, ok := p.embeddings[name]
	return e, ok
}

// embeddings checks the models' embedding declarations and that each group
// whose models declare one declares the same in all of them, and records
// them for Policy.Embedding.
func (b *builder) embeddings(f *File) error {
	for i := range f.Models {
		m := &f.Models[i]
		if m.Embedding == nil {
			continue
		}
		at := fmt.Sprintf("models[%d].embedding", i)
		switch {
		case m.Embedding.Dimensions <= 0:
			return b.errf(at+".dimensions", "required: the length of the model's vectors, positive (got %d)", m.Embedding.Dimensions)
		case m.Embedding.Family == "":
			return b.errf(at+".family", "required: the name of the model's vector space, such as the model id")
		}
		if b.p.embeddings == nil {
			b.p.embeddings = map[string]EmbeddingSpec{}
		}
		b.p.embeddings[m.Name] = *m.Embedding
	}
	for i := range f.Groups {
		gs := &f.Groups[i]
		var (
			first string
			want  EmbeddingSpec
		)
		for j, name := range gs.Models {
			e, ok := b.p.embeddings[name]
			switch {
			case j == 0:
				first, want = name, e
				if !ok {
					first = ""
				}
				continue
			case first == "" && !ok:
				continue
			case first == "":
				return b.errf(fmt.Sprintf("groups[%d].models[%d]", i, j),
					"%q declares an embedding (%d dimensions, family %q) but %q declares none: a group fails over embeddings only between models of one vector space, so declare the same embedding on each of its models or on none",
					name, e.Dimensions, e.Family, gs.Models[0])
			case !ok:
				return b.errf(fmt.Sprintf("groups[%d].models[%d]", i, j),
					"%q declares no embedding but %q declares one (%d dimensions, family %q): a group fails over embeddings only between models of one vector space, so declare the same embedding on each of its models or on none",
					name, first, want.Dimensions, want.Family)
			case e != want:
				return b.errf(fmt.Sprintf("groups[%d].models[%d]", i, j),
					"%q embeds into %d dimensions of family %q but %q into %d of family %q: a group fails over embeddings only between models of one vector space (vectors of two spaces in one index match nothing they should)",
					name, e.Dimensions, e.Family, first, want.Dimensions, want.Family)
			}
		}
		if first != "" {
			b.p.embeddings[gs.Name] = want
		}
	}
	return nil
}
