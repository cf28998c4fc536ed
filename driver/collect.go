package driver

import (
	"errors"
	"io"
	"iter"
	"strings"
)

// UserText returns a user message holding text: the common case of
// Request.Messages, spelled without the Content slice.
func UserText(text string) Message {
	return Message{Role: RoleUser, Content: []Content{{Text: text}}}
}

// AssistantText returns an assistant message holding text, for the model's
// earlier turns in a conversation.
func AssistantText(text string) Message {
	return Message{Role: RoleAssistant, Content: []Content{{Text: text}}}
}

// errStreamErrorPart stands in for an error part that carries no error.
var errStreamErrorPart = errors.New("retryhost: the stream reported an error part without an error")

// Parts returns the parts of s as an iterator, for a range loop:
//
//	for p, err := range driver.Parts(s) {
//		if err != nil { return err }
//		…
//	}
//
// It yields each part with a nil error, ends after the last part (io.EOF
// is not yielded), and yields an error that ends the stream once, with a
// zero Part. An error part (KindError) is yielded as its error. Parts
// closes s when the loop ends, however it ends (a break included), so the
// caller need not; the iterator is single-use, like the stream.
func Parts(s Stream) iter.Seq2[Part, error] {
	return func(yield func(Part, error) bool) {
		defer s.Close()
		for {
			p, err := s.Recv()
			if err == io.EOF {
				return
			}
			if err == nil && p.Kind == KindError {
				if err = p.Err; err == nil {
					err = errStreamErrorPart
				}
			}
			if err != nil {
				yield(Part{}, err)
				return
			}
			if !yield(p, nil) {
				return
			}
		}
	}
}

// Collect reads s to its end and assembles the *Response a Generate call
// would have returned: the text and reasoning of each block joined into one
// part (in the order the blocks opened), each complete tool call, tool
// result, file and source, the finish reason, usage, response metadata and
// warnings. Tool-input deltas are not kept: the tool call that completes
// them carries the whole input. Raw parts are dropped. Collect closes s.
//
// Like io.ReadAll, on an error it returns what it collected before the
// error together with the error: after a stream committed, that is the
// truncated answer. Collect holds the whole answer in memory; what bounds
// it is the request's MaxOutputTokens and the stream's deadlines.
func Collect(s Stream) (*Response, error) {
	resp := &Response{}
	type block struct {
		at  int // index in resp.Content
		buf strings.Builder
	}
	var blocks map[blockKey]*block
	flush := func() {
		for _, b := range blocks {
			resp.Content[b.at].Delta = b.buf.String()
		}
	}
	for p, err := range Parts(s) {
		if err != nil {
			flush()
			return resp, err
		}
		switch p.Kind {
		case KindTextDelta, KindReasoningDelta:
			k := blockKey{p.Kind, p.ID}
			b := blocks[k]
			if b == nil {
				if blocks == nil {
					blocks = map[blockKey]*block{}
				}
				b = &block{at: len(resp.Content)}
				blocks[k] = b
				resp.Content = append(resp.Content, Part{Kind: p.Kind, ID: p.ID})
			}
			b.buf.WriteString(p.Delta)
		case KindToolCall, KindToolResult, KindFile, KindSource:
			resp.Content = append(resp.Content, p)
		case KindFinish:
			if p.Finish != nil {
				resp.Finish, resp.Usage = p.Finish.Reason, p.Finish.Usage
			}
		case KindResponseMeta:
			if p.Meta != nil {
				resp.Meta = *p.Meta
			}
		case KindStreamStart:
			resp.Warnings = append(resp.Warnings, p.Warnings...)
		}
	}
	flush()
	return resp, nil
}

type blockKey struct {
	kind PartKind
	id   string
}
