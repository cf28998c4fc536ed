package adapter

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// RateLimitScope names the rate limits a model's calls count against, for
// driver.RateLimitScoper: the provider, the server (base URL), a hash of
// the API key (never the key itself: the scope is logged and stored, in a
// shared store too) and the model id, the unit the big providers count
// per account. Two declarations of one upstream model on one account
// (under two keys, in two groups) share it, so a Retry-After on one keeps
// the other out as well.
func RateLimitScope(provider, base, apiKey, id string) string {
	var b strings.Builder
	b.WriteString(provider)
	b.WriteByte(' ')
	b.WriteString(strings.TrimRight(base, "/"))
	b.WriteString(" key:")
	if apiKey == "" {
		b.WriteString("none")
	} else {
		h := sha256.Sum256([]byte(apiKey))
		b.WriteString(hex.EncodeToString(h[:8]))
	}
	b.WriteString(" model:")
	b.WriteString(id)
	return b.String()
}
