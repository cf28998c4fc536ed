package main

import "strings"

// streamDone reports whether a relayed stream ended whole: its end marker,
// then the gateway's attempt trail (an SSE comment line) last.
func streamDone(body string) bool {
	i := strings.LastIndex(body, "data: [DONE]\n\n: retryhost {")
	return i >= 0 && strings.HasSuffix(body, "}\n\n") && !strings.Contains(body[i+len("data: [DONE]\n\n"):len(body)-2], "\n")
}
