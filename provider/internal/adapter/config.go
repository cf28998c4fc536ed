package adapter

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
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

// CheckKey rejects an empty or blank model key (WithKey): the driver tells
// models apart by key.
func CheckKey(provider, key string) error {
	if strings.TrimSpace(key) == "" {
		return fmt.Errorf("%s: empty model key", provider)
	}
	return nil
}

// ProviderName returns the provider name a model's New settles on: def
// unless WithProvider set one (set), which may not be blank. provider
// prefixes the error ("gemini").
func ProviderName(provider, def, name string, set bool) (string, error) {
	if !set {
		return def, nil
	}
	if strings.TrimSpace(name) == "" {
		return "", fmt.Errorf("%s: empty provider name", provider)
	}
	return name, nil
}

// ModelKey returns the key a model's New settles on, by which the driver
// tells models apart: "<name>/<id>" (name the provider name) unless
// WithKey set one (set), which CheckKey holds.
func ModelKey(provider, name, id, key string, set bool) (string, error) {
	if !set {
		return name + "/" + id, nil
	}
	if err := CheckKey(provider, key); err != nil {
		return "", err
	}
	return key, nil
}

// Names checks what a model's New starts with, the same way for every
// adapter built over an SDK of its own: the model id (not blank), the
// provider name (ProviderName, def being provider) and the model key
// (ModelKey), which it returns. provider prefixes the errors.
func Names(provider, id, name string, nameSet bool, key string, keySet bool) (string, string, error) {
	if strings.TrimSpace(id) == "" {
		return "", "", errors.New(provider + ": empty model id")
	}
	name, err := ProviderName(provider, provider, name, nameSet)
	if err != nil {
		return "", "", err
	}
	if key, err = ModelKey(provider, name, id, key, keySet); err != nil {
		return "", "", err
	}
	return name, key, nil
}

// Headers returns the headers a model's WithHeader options added, in
// order, as one http.Header (a name given twice has both values), each
// name checked by CheckHeader; provider prefixes the error.
func Headers(provider string, headers [][2]string) (http.Header, error) {
	hdr := make(http.Header, len(headers))
	for _, h := range headers {
		if err := CheckHeader(provider, h[0]); err != nil {
			return nil, err
		}
		hdr.Add(h[0], h[1])
	}
	return hdr, nil
}

// CheckHeader rejects a header that could not be sent.
func CheckHeader(provider, name string) error {
	if name == "" || strings.ContainsFunc(name, func(r rune) bool {
		return r <= ' ' || r >= 0x7f || strings.ContainsRune("\"(),/:;<=>?@[\\]{}", r)
	}) {
		return fmt.Errorf("%s: %q is not a valid header name", provider, name)
	}
	return nil
}

// CheckParam rejects a request-body field name that the SDKs' JSON-path
// option would read as a path (a dot, a wildcard…) rather than one top-level
// field.
func CheckParam(provider, name string) error {
	if name == "" || strings.ContainsFunc(name, func(r rune) bool {
		return !(r == '_' || r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
	}) {
		return fmt.Errorf("%s: request parameter %q is not a top-level field name (letters, digits, '_', '-')", provider, name)
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

// JSONKey escapes a top-level field name for the SDKs' option.WithJSONSet,
// whose key is a path ("a.b" would set b inside a; '*', '?', '|', '#', '@'
// and ':' mean more): every character that is not a letter, digit, '_' or
// '-' is escaped, so the name is taken literally. Request.ProviderOptions
// fields go through it: a gateway forwards its client's fields unchanged.
func JSONKey(k string) string {
	var b strings.Builder
	for _, r := range k {
		if !(r == '_' || r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r > 0x7f) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
