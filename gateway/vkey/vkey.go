// Package vkey is the gateway's virtual keys: client API keys, each with
// its own id, routes, rate limits, token and spend budgets, expiry and
// metadata, kept
// in a key file whose secrets are stored only as SHA-256 hashes.
//
// A key file is JSON:
//
//	{
//	  "on_store_down": "local",
//	  "keys": [
//	    {"id": "team-a-ci", "hash": "sha256:9f86d0…", "routes": ["gpt-4o", "claude-*"],
//	     "rpm": 600, "tpm": 200000, "max_concurrent": 16,
//	     "budget": {"tokens_per_day": 5000000, "tokens_per_month": 100000000, "cost_per_month": 250},
//	     "expires": "2027-06-30T00:00:00Z", "metadata": {"team": "a", "owner": "ana@example.com"}}
//	  ]
//	}
//
// A [Set] is the file parsed: a map from a secret's SHA-256 to its key,
// so that finding a request's key costs one hash and one map lookup
// whatever the number of keys. retryhost keys writes the file; retryhost
// serve --keys-file reads it, and again when it changes.
package vkey

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"
	"unsafe"
)

// Errors of a key file.
var (
	// ErrKeyFile is the error of a key file that is not valid; the
	// *FileError that wraps it says where.
	ErrKeyFile = errors.New("key file")
	// ErrNoKey is the error of a key id that the file does not have.
	ErrNoKey = errors.New("no such key")
)

// FileError is a key file's mistake: the key (its index and id, when it
// has one) and what is wrong.
type FileError struct {
	Index int    // the key's index in "keys"; -1 for the file as a whole
	ID    string // the key's id, if any
	Msg   string
}

func (e *FileError) Error() string {
	switch {
	case e.Index < 0:
		return "key file: " + e.Msg
	case e.ID != "":
		return fmt.Sprintf("key file: keys[%d] (%q): %s", e.Index, e.ID, e.Msg)
	}
	return fmt.Sprintf("key file: keys[%d]: %s", e.Index, e.Msg)
}

func (e *FileError) Unwrap() error { return ErrKeyFile }

// Limits on a key file.
const (
	// MaxFileBytes bounds a key file (some 400,000 keys of 250 bytes).
	MaxFileBytes = 128 << 20
	// MaxIDLen bounds a key's id (it labels logs and metrics).
	MaxIDLen = 64
	// MaxMetadata bounds a key's metadata entries; MaxMetadataLen each
	// name and value.
	MaxMetadata    = 16
	MaxMetadataLen = 256
	// MaxRoutes bounds the route patterns of a key.
	MaxRoutes = 256
	// MaxCost bounds a spend budget (cost_per_day, cost_per_month), well
	// within the exact range of the float Redis counts spend in.
	MaxCost = 1e12
)

// On a fleet-wide store's outage ("on_store_down").
const (
	// StoreDownLocal: each replica limits on its own, in process, until
	// the store is back (the default).
	StoreDownLocal = "local"
	// StoreDownRefuse: every request of a limited key is refused (503,
	// code limits_unavailable) until the store is back.
	StoreDownRefuse = "refuse"
)

// File is a key file's content.
type File struct {
	// OnStoreDown is what a fleet-wide limit store's outage does:
	// StoreDownLocal (default) or StoreDownRefuse.
	OnStoreDown string `json:"on_store_down,omitempty"`
	Keys        []*Key `json:"keys"`
}

// Key is one virtual key. Zero limits are no limit.
type Key struct {
	// ID names the key in logs, metrics and the CLI (letters, digits,
	// "-", "_", ".", at most MaxIDLen); unique in a file.
	ID string `json:"id"`
	// Hash is "sha256:" and the hex SHA-256 of the secret; the secret
	// itself is stored nowhere.
	Hash string `json:"hash"`
	// Routes are the models (route names) the key may ask for: exact
	// names, or a prefix ending in "*" ("claude-*"); "*" or none is
	// every route.
	Routes []string `json:"routes,omitempty"`
	// RPM and TPM are requests and tokens (input and output) per minute.
	RPM int64 `json:"rpm,omitempty"`
	TPM int64 `json:"tpm,omitempty"`
	// MaxConcurrent caps the key's requests in flight on one replica.
	MaxConcurrent int    `json:"max_concurrent,omitempty"`
	Budget        Budget `json:"budget,omitzero"`
	// Expires: the key is refused from then on; zero never expires.
	Expires time.Time `json:"expires,omitzero"`
	// Revoked: the key is refused.
	Revoked bool `json:"revoked,omitempty"`
	// Created is when retryhost keys made it (informational).
	Created  time.Time         `json:"created,omitzero"`
	Metadata map[string]string `json:"metadata,omitempty"`

	sum [sha256.Size]byte
}

// Budget is what a key may spend per UTC day and per calendar month (UTC).
// A spent budget refuses the key's requests until its period ends; the
// request that crosses it is served and counted in full.
type Budget struct {
	TokensPerDay   int64 `json:"tokens_per_day,omitempty"`
	TokensPerMonth int64 `json:"tokens_per_month,omitempty"`
	// CostPerDay and CostPerMonth are spend budgets, in the currency of
	// the policy's price table: every attempt's cost at its model's price
	// (an unpriced model costs nothing), counted when the request ends.
	CostPerDay   float64 `json:"cost_per_day,omitempty"`
	CostPerMonth float64 `json:"cost_per_month,omitempty"`
}

// Spends reports whether b has a spend (cost) budget.
func (b Budget) Spends() bool { return b.CostPerDay > 0 || b.CostPerMonth > 0 }

// Limited reports whether k has a rate or budget for a Limiter to keep.
func (k *Key) Limited() bool {
	return k.RPM > 0 || k.TPM > 0 || k.Budget.TokensPerDay > 0 || k.Budget.TokensPerMonth > 0 || k.Budget.Spends()
}

// Status is why a key is not served now.
type Status int

const (
	Valid Status = iota
	Expired
	Revoked
)

// StatusAt returns the key's status at now.
func (k *Key) StatusAt(now time.Time) Status {
	switch {
	case k.Revoked:
		return Revoked
	case !k.Expires.IsZero() && !now.Before(k.Expires):
		return Expired
	}
	return Valid
}

// Allows reports whether the key may ask for route.
func (k *Key) Allows(route string) bool {
	if len(k.Routes) == 0 {
		return true
	}
	for _, p := range k.Routes {
		if p == route || strings.HasSuffix(p, "*") && strings.HasPrefix(route, p[:len(p)-1]) {
			return true
		}
	}
	return false
}

// Set is a key file parsed, by hash and by id. It is read-only once made
// and safe for concurrent use. Its keys' strings may share the memory of
// the file or records they were read from, which stays allocated while
// any of its keys is in use.
type Set struct {
	OnStoreDown string
	keys        []*Key
	byHash      map[[sha256.Size]byte]*Key
	byID        map[string]*Key
}

// Len returns the number of keys.
func (s *Set) Len() int { return len(s.keys) }

// Keys returns the keys in file order (not to be changed).
func (s *Set) Keys() []*Key { return s.keys }

// ByID returns the key with id.
func (s *Set) ByID(id string) (*Key, bool) {
	k, ok := s.byID[id]
	return k, ok
}

// Lookup returns the key whose secret is secret. The map is keyed by the
// secret's SHA-256, so its lookup learns nothing of a secret (an attacker
// who could time it would learn bits of a hash whose preimage they do
// not have); the hash found is compared again in constant time.
func (s *Set) Lookup(secret string) (*Key, bool) {
	sum := sum256(secret)
	k := s.byHash[sum]
	if k == nil || subtle.ConstantTimeCompare(sum[:], k.sum[:]) != 1 {
		return nil, false
	}
	return k, true
}

// sum256 is secret's SHA-256, hashed from a copy on the stack: the
// []byte conversion of a string longer than 32 bytes (a NewSecret's is
// 47) is a heap allocation on every request.
func sum256(secret string) [sha256.Size]byte {
	var b [128]byte
	if len(secret) > len(b) {
		return sha256.Sum256([]byte(secret))
	}
	return sha256.Sum256(b[:copy(b[:], secret)])
}

// Parse reads a key file's content.
func Parse(data []byte) (*Set, error) {
	if len(data) > MaxFileBytes {
		return nil, &FileError{Index: -1, Msg: fmt.Sprintf("%d bytes, more than %d", len(data), MaxFileBytes)}
	}
	f, err := decodeFile(data)
	if err != nil {
		return nil, &FileError{Index: -1, Msg: err.Error()}
	}
	return f.Set()
}

// Set checks the file and returns it as a Set.
func (f *File) Set() (*Set, error) { return f.set(nil) }

// set is Set; checked, when not nil, are f.Keys already checked, in the
// order they are in memory (in which the maps are filled faster).
func (f *File) set(checked []*Key) (*Set, error) {
	switch f.OnStoreDown {
	case "":
		f.OnStoreDown = StoreDownLocal
	case StoreDownLocal, StoreDownRefuse:
	default:
		return nil, &FileError{Index: -1, Msg: fmt.Sprintf("on_store_down is %q: want %q or %q", f.OnStoreDown, StoreDownLocal, StoreDownRefuse)}
	}
	bad, badErr := -1, (*FileError)(nil)
	if checked == nil {
		bad, badErr = checkKeys(f.Keys)
		checked = f.Keys
	}
	if bad < 0 {
		if s := indexKeys(f.OnStoreDown, f.Keys, checked); s != nil {
			return s, nil
		}
	}
	// A key not valid, or two keys with one id or hash: the first
	// mistake in the file's order is the error.
	s := &Set{byHash: make(map[[sha256.Size]byte]*Key), byID: make(map[string]*Key)}
	for i, k := range f.Keys {
		if i == bad {
			return nil, badErr
		}
		if s.byID[k.ID] != nil {
			return nil, &FileError{Index: i, ID: k.ID, Msg: "a second key with this id"}
		}
		if o := s.byHash[k.sum]; o != nil {
			return nil, &FileError{Index: i, ID: k.ID, Msg: fmt.Sprintf("the same hash as %q", o.ID)}
		}
		s.byID[k.ID], s.byHash[k.sum] = k, k
	}
	return nil, &FileError{Index: -1, Msg: "two keys with one id or hash"} // not reached: the loop finds them
}

// indexKeys returns the Set of keys, all valid, its two maps filled at
// once (one goroutine each when there are many keys) from inMemory (the
// same keys, in any order); nil when two keys share an id or a hash.
func indexKeys(onStoreDown string, keys, inMemory []*Key) *Set {
	s := &Set{OnStoreDown: onStoreDown, keys: keys}
	byHash := func() {
		s.byHash = make(map[[sha256.Size]byte]*Key, len(keys))
		for _, k := range inMemory {
			s.byHash[k.sum] = k
		}
	}
	byID := func() {
		s.byID = make(map[string]*Key, len(keys))
		for _, k := range inMemory {
			s.byID[k.ID] = k
		}
	}
	if runtime.GOMAXPROCS(0) > 1 && len(keys) >= checkParallelMin {
		var wg sync.WaitGroup
		wg.Go(byHash)
		byID()
		wg.Wait()
	} else {
		byHash()
		byID()
	}
	if len(s.byHash) != len(keys) || len(s.byID) != len(keys) {
		return nil
	}
	return s
}

// checkParallelMin is the least number of keys checkKeys checks in
// parallel chunks.
const checkParallelMin = 4096

// checkKeys checks keys (and sets each one's sum) and returns the index
// of the first, in order, that is nil or not valid, with its error; -1
// if all are valid. A large set is checked in chunks, one goroutine per
// CPU.
func checkKeys(keys []*Key) (int, *FileError) {
	check := func(lo, hi int) (int, *FileError) {
		for i := lo; i < hi; i++ {
			k := keys[i]
			if k == nil {
				return i, &FileError{Index: i, Msg: "null"}
			}
			if err := k.check(); err != nil {
				return i, &FileError{Index: i, ID: k.ID, Msg: err.Error()}
			}
		}
		return -1, nil
	}
	n := runtime.GOMAXPROCS(0)
	if n < 2 || len(keys) < checkParallelMin {
		return check(0, len(keys))
	}
	bad := make([]int, n)
	errs := make([]*FileError, n)
	var wg sync.WaitGroup
	for j := range n {
		wg.Go(func() { bad[j], errs[j] = check(j*len(keys)/n, (j+1)*len(keys)/n) })
	}
	wg.Wait()
	for j := range n {
		if bad[j] >= 0 {
			return bad[j], errs[j]
		}
	}
	return -1, nil
}

func (k *Key) check() error {
	if err := CheckID(k.ID); err != nil {
		return err
	}
	hx, ok := strings.CutPrefix(k.Hash, "sha256:")
	if !ok || len(hx) != 2*sha256.Size {
		return errors.New(`hash must be "sha256:" and 64 hex digits`)
	}
	if _, err := hex.Decode(k.sum[:], []byte(hx)); err != nil {
		return fmt.Errorf("hash: %w", err)
	}
	switch {
	case k.RPM < 0 || k.TPM < 0 || k.MaxConcurrent < 0:
		return errors.New("rpm, tpm and max_concurrent must not be negative")
	case k.Budget.TokensPerDay < 0 || k.Budget.TokensPerMonth < 0 || k.Budget.CostPerDay < 0 || k.Budget.CostPerMonth < 0:
		return errors.New("a budget must not be negative")
	case !(k.Budget.CostPerDay <= MaxCost && k.Budget.CostPerMonth <= MaxCost): // NaN too
		return fmt.Errorf("a cost budget over %g", float64(MaxCost))
	case len(k.Routes) > MaxRoutes:
		return fmt.Errorf("%d routes, more than %d", len(k.Routes), MaxRoutes)
	case len(k.Metadata) > MaxMetadata:
		return fmt.Errorf("%d metadata entries, more than %d", len(k.Metadata), MaxMetadata)
	}
	for _, r := range k.Routes {
		if r == "" || strings.Contains(r[:len(r)-1], "*") {
			return fmt.Errorf("route %q: a name, or a prefix ending in *", r)
		}
	}
	for n, v := range k.Metadata {
		if len(n) > MaxMetadataLen || len(v) > MaxMetadataLen {
			return fmt.Errorf("metadata %q: a name or value longer than %d bytes", n, MaxMetadataLen)
		}
	}
	return nil
}

// CheckID reports whether id is a valid key id.
func CheckID(id string) error {
	if id == "" || len(id) > MaxIDLen {
		return fmt.Errorf("id %q: 1 to %d characters", id, MaxIDLen)
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("id %q: letters, digits, -, _ and . only", id)
		}
	}
	return nil
}

// Load reads and parses the key file at path.
func Load(path string) (*Set, error) {
	f, err := ReadFile(path)
	if err != nil {
		return nil, err
	}
	return f.Set()
}

// ReadFile reads the key file at path without checking its keys (for
// retryhost keys, which edits it).
func ReadFile(path string) (*File, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if st.Size() > MaxFileBytes {
		return nil, &FileError{Index: -1, Msg: fmt.Sprintf("%s: %d bytes, more than %d", path, st.Size(), MaxFileBytes)}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(data) > MaxFileBytes { // grew since
		return nil, &FileError{Index: -1, Msg: fmt.Sprintf("%s: %d bytes, more than %d", path, len(data), MaxFileBytes)}
	}
	// data is not used again: the keys' strings may be parts of it.
	f, err := decodeString(unsafe.String(unsafe.SliceData(data), len(data)))
	if err != nil {
		return nil, &FileError{Index: -1, Msg: fmt.Sprintf("%s: %v", path, err)}
	}
	return f, nil
}

// WriteFile writes f to path atomically: a temporary file beside it,
// synced, renamed over it, so that a reader sees the old file or the new,
// never a part. A new file is readable by its owner only (0600); an
// existing one keeps its permissions. Two writers at once: the last
// rename wins.
func WriteFile(path string, f *File) error {
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	mode := os.FileMode(0o600)
	if st, err := os.Stat(path); err == nil {
		mode = st.Mode().Perm()
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(append(b, '\n'))
	if err == nil {
		err = tmp.Chmod(mode)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// SecretPrefix starts every secret NewSecret makes.
const SecretPrefix = "rhk-"

// NewSecret returns a new random secret (256 bits) and its Hash.
func NewSecret() (secret, hash string) {
	var b [32]byte
	_, _ = rand.Read(b[:])
	secret = SecretPrefix + base64.RawURLEncoding.EncodeToString(b[:])
	return secret, Hash(secret)
}

// Hash returns secret's hash as a key file stores it.
func Hash(secret string) string {
	sum := sum256(secret)
	return "sha256:" + hex.EncodeToString(sum[:])
}
