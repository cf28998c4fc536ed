package gateway

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/retryhost/retryhost/gateway/vkey"
)

// noKeys stands for the plain keys while only virtual keys are set.
var noKeys [][sha256.Size]byte

// SetAPIKeys replaces the client keys (WithAPIKeys) for every request
// from now on, at once: a key left out is refused from the next request,
// a new one accepted. It needs at least one key and no empty one (a
// gateway started without keys starts requiring them); on an error the
// keys in use stay. retryhost serve calls it when its --api-keys-file
// changes or on SIGHUP.
func (g *Gateway) SetAPIKeys(keys ...string) error {
	if len(keys) == 0 {
		return errors.New("gateway: SetAPIKeys needs at least one key")
	}
	var c config
	if err := WithAPIKeys(keys...)(&c); err != nil {
		return err
	}
	g.keys.Store(&c.keys)
	return nil
}

// authed wraps h with the API key check, against the keys in use when the
// request arrives (none: open); a refusal is in d's format. A request is
// served when any credential it presents (a bearer token, an X-Api-Key)
// is a key: a client may send both, one of them stale (an SDK's
// OPENAI_API_KEY from the environment beside the x-api-key it was given).
// Each credential is compared with every key, in constant time.
func (g *Gateway) authed(d door, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		keys, set := g.keys.Load(), g.keySet.Load()
		if keys == nil && set == nil {
			h(w, r)
			return
		}
		why := ""
		if set != nil {
			var k *vkey.Key
			if k, why = virtualKey(r, set, time.Now()); k != nil {
				h(w, r.WithContext(context.WithValue(r.Context(), keyCtxKey{}, k)))
				return
			}
		}
		if keys == nil {
			keys = &noKeys
		}
		bearerKey, _ := bearer(r.Header.Get("Authorization"))
		match := 0
		for _, key := range [2]string{bearerKey, r.Header.Get("X-Api-Key")} {
			if key = strings.TrimSpace(key); key == "" {
				continue // keys are never empty
			}
			sum := keySum(key)
			for i := range *keys {
				match |= subtle.ConstantTimeCompare(sum[:], (*keys)[i][:])
			}
		}
		if match != 1 {
			if why == "" {
				why = "retryhost gateway: missing or invalid API key"
			}
			g.refuseKey(w, r, d, why)
			return
		}
		h(w, r)
	}
}

// keySum is key's SHA-256, hashed from a copy on the stack: the []byte
// conversion of a string longer than 32 bytes is a heap allocation.
func keySum(key string) [sha256.Size]byte {
	var b [128]byte
	if len(key) > len(b) {
		return sha256.Sum256([]byte(key))
	}
	return sha256.Sum256(b[:copy(b[:], key)])
}

// bearer returns the credentials of an "Authorization: Bearer KEY"
// header; the scheme is case-insensitive (RFC 9110, 11.1), as some clients
// send "bearer".
func bearer(h string) (string, bool) {
	scheme, key, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return key, true
}

// enter admits a chat request: its client (clientOf) and 0, or the status
// refused with (the answer written in d's format) when the gateway drains,
// is full, or the client holds its share (WithMaxConcurrentPerClient).
func (g *Gateway) enter(w http.ResponseWriter, r *http.Request, d door) (string, int) {
	client := g.clientOf(r)
	most := g.cfg.maxPerClient
	k := keyOf(r.Context())
	if k != nil && k.MaxConcurrent > 0 {
		most = min(most, k.MaxConcurrent)
	}
	g.mu.Lock()
	if g.draining.Load() {
		g.mu.Unlock()
		w.Header().Set("Connection", "close")
		writeErr(w, d, errShutdown)
		return "", http.StatusServiceUnavailable
	}
	select {
	case g.sem <- struct{}{}:
	default:
		g.mu.Unlock()
		g.stats.rejectedBusy.Add(1)
		w.Header().Set("Retry-After", retryAfterHeader(g.cfg.retryAfterBusy))
		writeErr(w, d, apiError{status: http.StatusTooManyRequests, typ: "rate_limit_error", code: "gateway_busy",
			msg: fmt.Sprintf("retryhost gateway: %d requests in flight, the most it serves at once; retry later", cap(g.sem))})
		return "", http.StatusTooManyRequests
	}
	if g.perClient[client] >= most {
		<-g.sem
		g.mu.Unlock()
		g.stats.rejectedClient.Add(1)
		w.Header().Set("Retry-After", retryAfterHeader(g.cfg.retryAfterBusy))
		writeErr(w, d, apiError{status: http.StatusTooManyRequests, typ: "rate_limit_error", code: "client_busy",
			msg: fmt.Sprintf("retryhost gateway: this client has %d requests in flight, the most one client may have at once; retry later", most)})
		return "", http.StatusTooManyRequests
	}
	g.perClient[client]++
	g.inflight.Add(1)
	g.mu.Unlock()
	g.metrics.inflight.Inc()
	return client, 0
}

func (g *Gateway) leave(client string) {
	g.metrics.inflight.Dec()
	g.mu.Lock()
	if g.perClient[client]--; g.perClient[client] <= 0 {
		delete(g.perClient, client)
	}
	g.mu.Unlock()
	<-g.sem
	g.inflight.Done()
}

// clientOf is who a request counts against for WithMaxConcurrentPerClient:
// the API key it was admitted with, when the gateway requires keys (a
// credential that is no key names no client: a client cannot spread its
// requests over made-up keys), else its remote IP address.
func (g *Gateway) clientOf(r *http.Request) string {
	if k := keyOf(r.Context()); k != nil {
		return "key:" + k.ID // a virtual key's id: its requests count together across its rotations
	}
	if keys := g.keys.Load(); keys != nil {
		bearerKey, _ := bearer(r.Header.Get("Authorization"))
		for _, key := range [2]string{bearerKey, r.Header.Get("X-Api-Key")} {
			if key = strings.TrimSpace(key); key == "" {
				continue
			}
			sum := keySum(key)
			for i := range *keys {
				if subtle.ConstantTimeCompare(sum[:], (*keys)[i][:]) == 1 {
					return string(sum[:])
				}
			}
		}
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return "ip:" + host
}
