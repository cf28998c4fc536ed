package adapter

import (
	"fmt"
	"net/url"
	"strconv"
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

// ServerAddress returns the host and port a base URL points at (the port
// from the scheme when the URL has none), for telemetry's server.address
// and server.port; "", 0 for a URL it cannot read.
func ServerAddress(base string) (host string, port int) {
	u, err := url.Parse(base)
	if err != nil || u.Hostname() == "" {
		return "", 0
	}
	if p, err := strconv.Atoi(u.Port()); err == nil {
		return u.Hostname(), p
	}
	switch u.Scheme {
	case "https":
		return u.Hostname(), 443
	case "http":
		return u.Hostname(), 80
	}
	return u.Hostname(), 0
}
