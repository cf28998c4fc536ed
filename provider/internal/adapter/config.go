package adapter

import (
	"fmt"
	"net/url"
)

// CheckBaseURL rejects a base URL that is not an absolute http(s) URL, at
// construction, so a typo never surfaces as a failed request. provider
// prefixes the error ("openai", "anthropic").
func CheckBaseURL(provider, raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%s: base URL %q is not an absolute http(s) URL", provider, raw)
	}
	return nil
}
