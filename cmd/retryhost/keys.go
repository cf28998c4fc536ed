package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"maps"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/retryhost/retryhost/gateway/vkey"
	redisstate "github.com/retryhost/retryhost/state/redis"
)

// keysCmd is `retryhost keys`: the virtual key file of `serve --keys-file`
// (or, with --keys-redis, the key set on Redis, each edit a transaction),
// edited in place (each change written whole to a temporary file renamed
// over it, so that a serve reading it sees the old file or the new).
var keysCmd = &command{
	name:    "keys",
	summary: "create, list, show, revoke and rotate the virtual keys of a key file (serve --keys-file) or a key set on Redis (--keys-redis), and set its on_store_down",
	subs: []*command{{
		name: "create", args: "ID",
		summary: "add a key to the file (made if missing) and print its secret, this once",
		help: "Adds a key named ID to the --keys-file, with a new random secret, which is printed on stdout " +
			"and stored nowhere: the file keeps only its SHA-256. A serve reading the file takes the key at its " +
			"next reload (at once with --watch, its default, or on SIGHUP). The file is made (0600) when it does " +
			"not exist.\n\nExit 0 once written; 1 when the file already has a key named ID; 2 for a bad flag " +
			"(a negative limit, a bad --expires); 3 when the file cannot be read or is not a valid key file." + keysRedisEditHelp,
		noFiles: true,
		setup: func(fs *flag.FlagSet) runFunc {
			h := keyHomeFlags(fs)
			var kf keyFlags
			kf.declare(fs)
			return func(ctx context.Context, e *env, args []string) int {
				return runKeysCreate(ctx, e, h, args, &kf)
			}
		},
	}, {
		name:    "list",
		summary: "list the file's keys, with their status and limits (never a secret or hash)",
		help: "Prints a line per key of the --keys-file: its id, status (valid, expired or revoked), routes, " +
			"requests and tokens per minute, budgets, expiry and metadata. No secret is stored, and the " +
			"hashes are not printed. With --json, an array of the keys.\n\nExit 0; 3 when the file cannot be " +
			"read or is not a valid key file." + keysRedisReadHelp,
		noFiles: true,
		setup: func(fs *flag.FlagSet) runFunc {
			h := keyHomeFlags(fs)
			asJSON := fs.Bool("json", false, "print the keys as a JSON array")
			return func(ctx context.Context, e *env, args []string) int {
				if len(args) > 0 {
					return e.usageError(keysSub("list"), "takes no argument")
				}
				return runKeysList(ctx, e, h, *asJSON)
			}
		},
	}, {
		name: "show", args: "ID",
		summary: "print one key's fields (never its secret or hash)",
		help: "Prints the key named ID of the --keys-file, a field a line, or with --json as an object: " +
			"everything but its hash.\n\nExit 0; 1 when the file has no key named ID; 3 when the file cannot " +
			"be read or is not a valid key file." + keysRedisReadHelp,
		noFiles: true,
		setup: func(fs *flag.FlagSet) runFunc {
			h := keyHomeFlags(fs)
			asJSON := fs.Bool("json", false, "print the key as a JSON object")
			return func(ctx context.Context, e *env, args []string) int {
				return runKeysShow(ctx, e, h, args, *asJSON)
			}
		},
	}, {
		name: "revoke", args: "ID",
		summary: "mark a key revoked: serve refuses it (401) from its next reload",
		help: "Marks the key named ID of the --keys-file revoked. A serve reading the file answers its " +
			"requests 401 from its next reload (at once with --watch, its default, or on SIGHUP); its " +
			"counters stay, so that a key revoked by mistake and restored by hand keeps its spend. A key " +
			"already revoked is left as it is.\n\nExit 0; 1 when the file has no key named ID; 3 when the " +
			"file cannot be read or is not a valid key file." + keysRedisEditHelp,
		noFiles: true,
		setup: func(fs *flag.FlagSet) runFunc {
			h := keyHomeFlags(fs)
			return func(ctx context.Context, e *env, args []string) int {
				return runKeysEdit(ctx, e, "revoke", h, args, revokeKey)
			}
		},
	}, {
		name: "rotate", args: "ID",
		summary: "give a key a new secret, printed this once; the old one stops working",
		help: "Gives the key named ID of the --keys-file a new random secret, printed on stdout and " +
			"stored nowhere, in place of the old one. A serve reading the file refuses the old secret and " +
			"accepts the new from its next reload (at once with --watch, its default, or on SIGHUP). The key " +
			"keeps its id, and with it its rate and budget counters.\n\nExit 0; 1 when the file has no key " +
			"named ID or the key is revoked; 3 when the file cannot be read or is not a valid key file." + keysRedisEditHelp,
		noFiles: true,
		setup: func(fs *flag.FlagSet) runFunc {
			h := keyHomeFlags(fs)
			return func(ctx context.Context, e *env, args []string) int {
				return runKeysEdit(ctx, e, "rotate", h, args, rotateKey)
			}
		},
	}, {
		name: "on-store-down", args: "[local|refuse]",
		summary: "print or set what limited keys get while the fleet's limit store (serve --limits-redis) is down",
		help: "With no argument, prints the on_store_down of the --keys-file: what a serve on --limits-redis " +
			"does with a limited key's request while that Redis does not answer. local (the default): each " +
			"replica limits in process, so N replicas admit up to N times a key's limits; refuse: the request " +
			"gets 503 limits_unavailable. With local or refuse, sets it, checked and written as the other " +
			"edits are; a serve takes it at its next reload (at once with --watch, its default, or on " +
			"SIGHUP).\n\nExit 0; 2 for a value other than local or refuse; 3 when the file cannot be read or " +
			"is not a valid key file." + keysRedisEditHelp,
		noFiles: true,
		setup: func(fs *flag.FlagSet) runFunc {
			h := keyHomeFlags(fs)
			return func(ctx context.Context, e *env, args []string) int {
				return runKeysOnStoreDown(ctx, e, h, args)
			}
		},
	}},
}

// The subcommands' help on --keys-redis, after their help on --keys-file.
const (
	keysRedisReadHelp = "\n\nWith --keys-redis URL in place of --keys-file, it reads the key set on that Redis, " +
		"as serve --keys-redis does; exit 3 also means Redis did not answer."
	keysRedisEditHelp = "\n\nWith --keys-redis URL in place of --keys-file, it edits the key set on that Redis " +
		"that serve --keys-redis reads: each edit is one transaction that moves the set's version, so that " +
		"edits at once all land and every serve polling the set takes it within a second; the exit codes are " +
		"the same, and 3 also means Redis did not answer."
)

func init() { register(keysCmd) }

func keysSub(name string) *command {
	for _, s := range commands["keys"].subs {
		if s.name == name {
			return s
		}
	}
	panic("no keys subcommand " + name)
}

// keyHome is where the keys live: a key file or a key set on Redis.
type keyHome struct{ path, redis string }

func keyHomeFlags(fs *flag.FlagSet) *keyHome {
	h := &keyHome{}
	fs.StringVar(&h.path, "keys-file", "", "the virtual key `FILE` (JSON), as serve --keys-file reads it; this or --keys-redis is required")
	fs.StringVar(&h.redis, "keys-redis", "", "the virtual key set on the Redis at `URL`, as serve --keys-redis reads it; each edit one transaction")
	return h
}

// where names the home in messages (a Redis URL without its password).
func (h *keyHome) where() string {
	if h.redis == "" {
		return h.path
	}
	if u, err := url.Parse(h.redis); err == nil {
		return "the key set on " + u.Redacted()
	}
	return "the key set on Redis"
}

// check refuses no home or two.
func (h *keyHome) check(e *env, c *command) (int, bool) {
	switch {
	case h.path != "" && h.redis != "":
		return e.usageError(c, "--keys-file and --keys-redis are two homes for the keys: give one, not both"), false
	case h.path == "" && h.redis == "":
		return e.usageError(c, "--keys-file or --keys-redis is required"), false
	}
	return exitOK, true
}

// store opens the Redis key set; the caller closes it.
func (h *keyHome) store(e *env) (*vkey.Store, int) {
	// A Redis that does not answer is this command's error, printed once;
	// go-redis would print each failed dial too.
	redisstate.QuietClientLogs()
	st, err := vkey.OpenStore(h.redis)
	if err != nil {
		return nil, e.errorf(exitInput, "--keys-redis: %v", err)
	}
	return st, exitOK
}

// keyFlags are create's limits and metadata.
type keyFlags struct {
	routes, meta           repeated
	rpm, tpm               int64
	maxConc                int
	tokensDay, tokensMonth int64
	costDay, costMonth     float64
	expires                string
}

func (kf *keyFlags) declare(fs *flag.FlagSet) {
	fs.Var(&kf.routes, "route", "a model the key may ask for: a route's `NAME`, or a prefix ending in * (repeatable; none: every route)")
	fs.Int64Var(&kf.rpm, "rpm", 0, "requests per minute (0: no limit)")
	fs.Int64Var(&kf.tpm, "tpm", 0, "tokens (input and output) per minute (0: no limit)")
	fs.IntVar(&kf.maxConc, "max-concurrent", 0, "requests in flight on one replica (0: no limit)")
	fs.Int64Var(&kf.tokensDay, "tokens-per-day", 0, "tokens per UTC day (0: no budget)")
	fs.Int64Var(&kf.tokensMonth, "tokens-per-month", 0, "tokens per calendar month, UTC (0: no budget)")
	fs.Float64Var(&kf.costDay, "cost-per-day", 0, "spend per UTC day, at the policy's prices, in their currency (0: no budget)")
	fs.Float64Var(&kf.costMonth, "cost-per-month", 0, "spend per calendar month, UTC (0: no budget)")
	fs.StringVar(&kf.expires, "expires", "", "when the key stops working: an RFC 3339 `TIME` or a duration from now (720h); none: never")
	fs.Var(&kf.meta, "meta", "a free-form `NAME=VALUE` (team, owner), repeatable")
}

// key builds the key flags describe, at now.
func (kf *keyFlags) key(id string, now time.Time) (*vkey.Key, error) {
	if kf.rpm < 0 || kf.tpm < 0 || kf.maxConc < 0 || kf.tokensDay < 0 || kf.tokensMonth < 0 || kf.costDay < 0 || kf.costMonth < 0 {
		return nil, errors.New("a limit or budget cannot be negative (0: none)")
	}
	k := &vkey.Key{ID: id, Routes: kf.routes, RPM: kf.rpm, TPM: kf.tpm, MaxConcurrent: kf.maxConc,
		Budget:  vkey.Budget{TokensPerDay: kf.tokensDay, TokensPerMonth: kf.tokensMonth, CostPerDay: kf.costDay, CostPerMonth: kf.costMonth},
		Created: now.UTC().Truncate(time.Second)}
	if kf.expires != "" {
		if t, err := time.Parse(time.RFC3339, kf.expires); err == nil {
			k.Expires = t
		} else if d, derr := time.ParseDuration(kf.expires); derr == nil && d > 0 {
			k.Expires = now.Add(d).UTC().Truncate(time.Second)
		} else {
			return nil, fmt.Errorf("--expires %q: an RFC 3339 time (2027-06-30T00:00:00Z) or a positive duration (720h)", kf.expires)
		}
	}
	for _, m := range kf.meta {
		n, v, ok := strings.Cut(m, "=")
		if !ok || n == "" {
			return nil, fmt.Errorf("--meta %q: NAME=VALUE", m)
		}
		if k.Metadata == nil {
			k.Metadata = map[string]string{}
		}
		k.Metadata[n] = v
	}
	return k, nil
}

// readKeys reads and checks the keys at h, as serve would load them: the
// error, printed, is the exit code's.
func readKeys(ctx context.Context, e *env, c *command, h *keyHome) (*vkey.File, int) {
	if code, ok := h.check(e, c); !ok {
		return nil, code
	}
	var f *vkey.File
	var err error
	if h.redis != "" {
		st, code := h.store(e)
		if st == nil {
			return nil, code
		}
		defer st.Close()
		if f, _, err = st.Read(ctx); err != nil {
			return nil, e.errorf(exitInput, "%s: %v", h.where(), err)
		}
	} else {
		f, err = vkey.ReadFile(h.path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return nil, e.errorf(exitInput, "%s: no such key file (retryhost keys create makes one)", h.path)
		case err != nil: // it names the file
			return nil, e.errorf(exitInput, "%v", err)
		}
	}
	down := f.OnStoreDown
	if _, err := f.Set(); err != nil {
		return nil, e.errorf(exitInput, "%s: %v", h.where(), err)
	}
	f.OnStoreDown = down // written back as it was
	return f, exitOK
}

func runKeysCreate(ctx context.Context, e *env, h *keyHome, args []string, kf *keyFlags) int {
	c := keysSub("create")
	if len(args) != 1 {
		return e.usageError(c, "want one ID, the new key's name")
	}
	id := args[0]
	if err := vkey.CheckID(id); err != nil {
		return e.usageError(c, "%v", err)
	}
	k, err := kf.key(id, time.Now())
	if err != nil {
		return e.usageError(c, "%v", err)
	}
	if code, ok := h.check(e, c); !ok {
		return code
	}
	secret, hash := vkey.NewSecret()
	k.Hash = hash
	if h.redis != "" {
		st, code := h.store(e)
		if st == nil {
			return code
		}
		defer st.Close()
		switch err := st.Create(ctx, k); {
		case errors.Is(err, vkey.ErrExists):
			return e.errorf(exitFail, "%s already has a key named %q (retryhost keys rotate gives it a new secret)", h.where(), id)
		case errors.Is(err, vkey.ErrKeyFile):
			return e.errorf(exitFail, "%v", err)
		case err != nil:
			return e.errorf(exitInput, "%s: %v", h.where(), err)
		}
	} else {
		f := &vkey.File{Keys: []*vkey.Key{}}
		if _, serr := os.Stat(h.path); !errors.Is(serr, fs.ErrNotExist) {
			var code int
			if f, code = readKeys(ctx, e, c, h); f == nil {
				return code
			}
		}
		if slices.ContainsFunc(f.Keys, func(o *vkey.Key) bool { return o.ID == id }) {
			return e.errorf(exitFail, "%s already has a key named %q (retryhost keys rotate gives it a new secret)", h.path, id)
		}
		f.Keys = append(f.Keys, k)
		if err := checkAndWrite(h.path, f); err != nil {
			return e.errorf(exitFail, "%v", err)
		}
	}
	fmt.Fprintln(e.stdout, secret)
	fmt.Fprintf(e.stderr, "%s: key %q added to %s; its secret above is shown this once\n", e.path, id, h.where())
	return exitOK
}

// checkAndWrite checks f as serve would load it, then writes it.
func checkAndWrite(path string, f *vkey.File) error {
	down := f.OnStoreDown
	if _, err := f.Set(); err != nil {
		return err
	}
	f.OnStoreDown = down
	return vkey.WriteFile(path, f)
}

// An edit changes k in place and says what it did; a secret to print is
// returned, and an error ends the command with exitFail.
type keyEdit func(k *vkey.Key) (msg, secret string, changed bool, err error)

func revokeKey(k *vkey.Key) (string, string, bool, error) {
	if k.Revoked {
		return "is already revoked", "", false, nil
	}
	k.Revoked = true
	return "revoked; serve refuses it from its next reload", "", true, nil
}

func rotateKey(k *vkey.Key) (string, string, bool, error) {
	if k.Revoked {
		return "", "", false, fmt.Errorf("key %q is revoked: create a new key rather than bring it back with a new secret", k.ID)
	}
	secret, hash := vkey.NewSecret()
	k.Hash = hash
	return "has a new secret, shown above this once; the old one is refused from serve's next reload", secret, true, nil
}

func runKeysEdit(ctx context.Context, e *env, name string, h *keyHome, args []string, edit keyEdit) int {
	c := keysSub(name)
	if len(args) != 1 {
		return e.usageError(c, "want one ID, the key's name")
	}
	var msg, secret string
	if h.redis != "" {
		if code, ok := h.check(e, c); !ok {
			return code
		}
		st, code := h.store(e)
		if st == nil {
			return code
		}
		defer st.Close()
		// The edit runs again when another changed the set meanwhile:
		// the secret printed is the last run's, the one stored.
		var editErr error
		_, err := st.Update(ctx, args[0], func(k *vkey.Key) (changed bool, err error) {
			msg, secret, changed, editErr = edit(k)
			return changed, editErr
		})
		switch {
		case err == nil:
		case errors.Is(err, vkey.ErrNoKey):
			return e.errorf(exitFail, "%s has no key named %q (retryhost keys list shows them)", h.where(), args[0])
		case editErr != nil && errors.Is(err, editErr), errors.Is(err, vkey.ErrContended):
			return e.errorf(exitFail, "%v", err)
		default: // Redis does not answer, or the key's record is not valid
			return e.errorf(exitInput, "%s: %v", h.where(), err)
		}
	} else {
		f, code := readKeys(ctx, e, c, h)
		if f == nil {
			return code
		}
		i := slices.IndexFunc(f.Keys, func(k *vkey.Key) bool { return k.ID == args[0] })
		if i < 0 {
			return e.errorf(exitFail, "%s has no key named %q (retryhost keys list shows them)", h.path, args[0])
		}
		var changed bool
		var err error
		msg, secret, changed, err = edit(f.Keys[i])
		if err != nil {
			return e.errorf(exitFail, "%v", err)
		}
		if changed {
			if err := checkAndWrite(h.path, f); err != nil {
				return e.errorf(exitFail, "%v", err)
			}
		}
	}
	if secret != "" {
		fmt.Fprintln(e.stdout, secret)
	}
	fmt.Fprintf(e.stderr, "%s: key %q %s\n", e.path, args[0], msg)
	return exitOK
}

func runKeysOnStoreDown(ctx context.Context, e *env, h *keyHome, args []string) int {
	c := keysSub("on-store-down")
	switch {
	case len(args) > 1:
		return e.usageError(c, "want at most one value: %s or %s", vkey.StoreDownLocal, vkey.StoreDownRefuse)
	case len(args) == 1 && args[0] != vkey.StoreDownLocal && args[0] != vkey.StoreDownRefuse:
		return e.usageError(c, "%q: want %s or %s", args[0], vkey.StoreDownLocal, vkey.StoreDownRefuse)
	}
	if len(args) == 0 || h.redis == "" {
		f, code := readKeys(ctx, e, c, h)
		if f == nil {
			return code
		}
		if len(args) == 0 {
			fmt.Fprintln(e.stdout, cmp.Or(f.OnStoreDown, vkey.StoreDownLocal))
			return exitOK
		}
		f.OnStoreDown = args[0]
		if err := checkAndWrite(h.path, f); err != nil {
			return e.errorf(exitFail, "%v", err)
		}
	} else {
		if code, ok := h.check(e, c); !ok {
			return code
		}
		st, code := h.store(e)
		if st == nil {
			return code
		}
		defer st.Close()
		if err := st.SetOnStoreDown(ctx, args[0]); err != nil {
			return e.errorf(exitInput, "%s: %v", h.where(), err)
		}
	}
	fmt.Fprintf(e.stderr, "%s: on_store_down of %s is %s; serve takes it from its next reload\n", e.path, h.where(), args[0])
	return exitOK
}

// keyView is a key as list and show print it: no hash.
type keyView struct {
	ID            string            `json:"id"`
	Status        string            `json:"status"`
	Routes        []string          `json:"routes,omitempty"`
	RPM           int64             `json:"rpm,omitempty"`
	TPM           int64             `json:"tpm,omitempty"`
	MaxConcurrent int               `json:"max_concurrent,omitempty"`
	Budget        vkey.Budget       `json:"budget,omitzero"`
	Expires       time.Time         `json:"expires,omitzero"`
	Created       time.Time         `json:"created,omitzero"`
	Metadata      map[string]string `json:"metadata,omitempty"`
}

func viewOf(k *vkey.Key, now time.Time) keyView {
	st := "valid"
	switch k.StatusAt(now) {
	case vkey.Revoked:
		st = "revoked"
	case vkey.Expired:
		st = "expired"
	}
	return keyView{ID: k.ID, Status: st, Routes: k.Routes, RPM: k.RPM, TPM: k.TPM, MaxConcurrent: k.MaxConcurrent,
		Budget: k.Budget, Expires: k.Expires, Created: k.Created, Metadata: k.Metadata}
}

func runKeysList(ctx context.Context, e *env, h *keyHome, asJSON bool) int {
	f, code := readKeys(ctx, e, keysSub("list"), h)
	if f == nil {
		return code
	}
	now := time.Now()
	views := make([]keyView, len(f.Keys))
	for i, k := range f.Keys {
		views[i] = viewOf(k, now)
	}
	if asJSON {
		return printJSON(e, views)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATUS\tROUTES\tRPM\tTPM\tBUDGET\tEXPIRES\tMETADATA")
	for _, v := range views {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", v.ID, v.Status, routesText(v.Routes), limitText(v.RPM), limitText(v.TPM),
			budgetText(v.Budget), timeText(v.Expires), metaText(v.Metadata))
	}
	if err := tw.Flush(); err != nil {
		return e.errorf(exitFail, "%v", err)
	}
	return exitOK
}

func runKeysShow(ctx context.Context, e *env, h *keyHome, args []string, asJSON bool) int {
	if len(args) != 1 {
		return e.usageError(keysSub("show"), "want one ID, the key's name")
	}
	f, code := readKeys(ctx, e, keysSub("show"), h)
	if f == nil {
		return code
	}
	i := slices.IndexFunc(f.Keys, func(k *vkey.Key) bool { return k.ID == args[0] })
	if i < 0 {
		return e.errorf(exitFail, "%s has no key named %q (retryhost keys list shows them)", h.where(), args[0])
	}
	v := viewOf(f.Keys[i], time.Now())
	if asJSON {
		return printJSON(e, v)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	for _, row := range [][2]string{
		{"id", v.ID}, {"status", v.Status}, {"routes", routesText(v.Routes)},
		{"rpm", limitText(v.RPM)}, {"tpm", limitText(v.TPM)}, {"max_concurrent", limitText(int64(v.MaxConcurrent))},
		{"budget", budgetText(v.Budget)}, {"expires", timeText(v.Expires)}, {"created", timeText(v.Created)},
		{"metadata", metaText(v.Metadata)},
	} {
		fmt.Fprintf(tw, "%s:\t%s\n", row[0], row[1])
	}
	if err := tw.Flush(); err != nil {
		return e.errorf(exitFail, "%v", err)
	}
	return exitOK
}

func printJSON(e *env, v any) int {
	enc := json.NewEncoder(e.stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return e.errorf(exitFail, "%v", err)
	}
	return exitOK
}

func routesText(r []string) string {
	if len(r) == 0 {
		return "*"
	}
	return strings.Join(r, ",")
}

func limitText(n int64) string {
	if n == 0 {
		return "-"
	}
	return strconv.FormatInt(n, 10)
}

func budgetText(b vkey.Budget) string {
	var parts []string
	if b.TokensPerDay > 0 {
		parts = append(parts, strconv.FormatInt(b.TokensPerDay, 10)+" tokens/day")
	}
	if b.TokensPerMonth > 0 {
		parts = append(parts, strconv.FormatInt(b.TokensPerMonth, 10)+" tokens/month")
	}
	if b.CostPerDay > 0 {
		parts = append(parts, "cost "+strconv.FormatFloat(b.CostPerDay, 'f', -1, 64)+"/day")
	}
	if b.CostPerMonth > 0 {
		parts = append(parts, "cost "+strconv.FormatFloat(b.CostPerMonth, 'f', -1, 64)+"/month")
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

func timeText(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func metaText(m map[string]string) string {
	if len(m) == 0 {
		return "-"
	}
	var parts []string
	for _, n := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, n+"="+m[n])
	}
	return strings.Join(parts, ",")
}
