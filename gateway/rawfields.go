package gateway

import (
	oai "github.com/openai/openai-go/v3"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/provider/openai"
)

// refusalBlock is the block the openai adapter delivers a refusal in when
// it came after content (and so could not fail over): the gateway sends it
// back as the refusal it was.
const refusalBlock = "refusal-0"

// rawFields are the response fields the driver does not model, taken from
// an OpenAI-compatible upstream's raw chunks (policy.Options.RawChunks;
// the policy's transforms never see them, and the driver keeps them in
// their place around held text, discarding those held with text a
// transform replaces; a policy with the "legacy" commit rule gets none,
// since a raw chunk would commit its stream):
// system_fingerprint and service_tier for every chunk, and choice 0's
// logprobs for the text delta mapped from the same chunk. Logprobs describe
// the upstream's tokens, so they go out only with a delta whose text is the
// chunk's own: any other goes out with "logprobs": null, and a
// non-streaming answer with any such delta has none at all.
type rawFields struct {
	fingerprint, tier string

	// The latest raw chunk's choice 0, until a delta takes its logprobs.
	lp                 string // its logprobs object (JSON); "" when null
	content, refusal   string // its delta's text
	lpContent, lpRefus string // its logprobs' content and refusal arrays (JSON)

	// The whole answer's logprobs, for a non-streaming request.
	allContent, allRefusal []byte // the arrays' items, comma-separated
	seen                   bool   // some chunk carried logprobs
	broken                 bool   // a delta's text was not its chunk's
}

// raw reads p when it holds an OpenAI chat.completion.chunk's fields: an
// openai.ChunkFields (what a policy's models send, read without the SDK),
// or the SDK's chunk itself (a model bound in code with WithRawChunks).
func (f *rawFields) raw(p *abi.Part) {
	if cf, ok := p.Raw.(openai.ChunkFields); ok {
		if cf.SystemFingerprint != "" {
			f.fingerprint = cf.SystemFingerprint
		}
		if cf.ServiceTier != "" {
			f.tier = cf.ServiceTier
		}
		f.content, f.refusal, f.lp, f.lpContent, f.lpRefus = cf.Content, cf.Refusal, cf.Logprobs, cf.LogprobsContent, cf.LogprobsRefusal
		if f.lp != "" {
			f.seen = true
		}
		return
	}
	c, ok := p.Raw.(oai.ChatCompletionChunk)
	if !ok {
		return
	}
	if c.SystemFingerprint != "" {
		f.fingerprint = c.SystemFingerprint
	}
	if c.ServiceTier != "" {
		f.tier = string(c.ServiceTier)
	}
	f.lp, f.content, f.refusal, f.lpContent, f.lpRefus = "", "", "", "", ""
	for i := range c.Choices {
		ch := &c.Choices[i]
		if ch.Index != 0 {
			continue
		}
		f.content, f.refusal = ch.Delta.Content, ch.Delta.Refusal
		if ch.JSON.Logprobs.Valid() {
			f.lp, f.seen = ch.JSON.Logprobs.Raw(), true
			if lp := &ch.Logprobs; lp.JSON.Content.Valid() {
				f.lpContent = lp.JSON.Content.Raw()
			}
			if lp := &ch.Logprobs; lp.JSON.Refusal.Valid() {
				f.lpRefus = lp.JSON.Refusal.Raw()
			}
		}
	}
}

// take returns the logprobs (JSON) that go with a text delta, "" for
// none, and adds them to the whole answer's.
func (f *rawFields) take(p *abi.Part) string {
	if !f.seen {
		// No chunk had logprobs yet: no delta has any to take, and a
		// chunk without them may come with no fields (they would repeat
		// the last ones), so its text is not there to compare.
		return ""
	}
	refusal := p.ID == refusalBlock
	want := f.content
	if refusal {
		want = f.refusal
	}
	if p.Delta != want {
		f.broken = true // rewritten: the tokens are not these
		return ""
	}
	lp := f.lp
	if lp == "" {
		return ""
	}
	if refusal {
		f.allRefusal = appendItems(f.allRefusal, f.lpRefus)
	} else {
		f.allContent = appendItems(f.allContent, f.lpContent)
	}
	f.lp, f.content, f.refusal = "", "", ""
	return lp
}

// appendItems appends the items of the JSON array arr to b, comma-separated.
func appendItems(b []byte, arr string) []byte {
	if len(arr) < 2 || arr[0] != '[' || arr[len(arr)-1] != ']' {
		return b
	}
	items := arr[1 : len(arr)-1]
	for len(items) > 0 && (items[0] == ' ' || items[0] == '\n' || items[0] == '\t' || items[0] == '\r') {
		items = items[1:]
	}
	if items == "" {
		return b
	}
	if len(b) > 0 {
		b = append(b, ',')
	}
	return append(b, items...)
}

// appendTop appends the top-level fields of a chunk or a completion.
func (f *rawFields) appendTop(b []byte) []byte {
	if f.fingerprint != "" {
		b = append(b, `,"system_fingerprint":`...)
		b = appendJSONString(b, f.fingerprint)
	}
	if f.tier != "" {
		b = append(b, `,"service_tier":`...)
		b = appendJSONString(b, f.tier)
	}
	return b
}

// appendLogprobs appends a delta's logprobs, or null.
func appendLogprobs(b []byte, lp string) []byte {
	if lp == "" {
		return append(b, "null"...)
	}
	return append(b, lp...)
}

// appendAll appends the whole answer's logprobs, or null.
func (f *rawFields) appendAll(b []byte) []byte {
	if !f.seen || f.broken {
		return append(b, "null"...)
	}
	b = append(b, `{"content":`...)
	b = appendArray(b, f.allContent)
	b = append(b, `,"refusal":`...)
	b = appendArray(b, f.allRefusal)
	return append(b, '}')
}

func appendArray(b, items []byte) []byte {
	if items == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	b = append(b, items...)
	return append(b, ']')
}
