package adapter

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// SameOriginRedirects returns a copy of hc (http.DefaultClient when nil)
// that follows a redirect only within the origin (scheme, host and port)
// of the request it began with, and past that check as hc would (at most
// 10 when hc has no CheckRedirect of its own).
//
// A provider's redirect elsewhere would carry the prompt there, and with it
// the API key: net/http drops Authorization only for another host name
// (not another port), and never a key sent in a header of the provider's
// own, as Anthropic's x-api-key. provider prefixes the error ("anthropic");
// the request then fails as a connection error, which the rules decide on.
func SameOriginRedirects(provider string, hc *http.Client) *http.Client {
	if hc == nil {
		hc = http.DefaultClient
	}
	c := *hc
	next := hc.CheckRedirect
	c.CheckRedirect = func(r *http.Request, via []*http.Request) error {
		if o := via[0].URL; !strings.EqualFold(r.URL.Scheme, o.Scheme) || !strings.EqualFold(r.URL.Host, o.Host) {
			return fmt.Errorf("%s: redirect to %s://%s refused: not the base URL's origin %s://%s", provider, r.URL.Scheme, r.URL.Host, o.Scheme, o.Host)
		}
		if next != nil {
			return next(r, via)
		}
		if len(via) >= 10 {
			return errors.New(provider + ": stopped after 10 redirects")
		}
		return nil
	}
	return &c
}
