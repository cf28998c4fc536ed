// Package sdk is the Go guest SDK for retryhost plugins: write a condition
// or a transform as plain Go, register it, build it to Wasm. The SDK does
// the ABI (abi/ABI.md): it registers a 64 KiB scratch buffer, decodes the
// records into abi.Attempt and abi.Part values, encodes your answers,
// declares your policy (with, for a transform, its static verdicts and
// auto_close: ABI v1.1), closes a decided stream itself, and yields to the
// scheduler every few hundred exports so the guest's runtime goroutines
// (the garbage collector's) run.
//
// A plugin is a main package that imports the kind it is,
// [github.com/retryhost/retryhost/plugins/sdk/condition] or
// [github.com/retryhost/retryhost/plugins/sdk/transform] (or both), and
// registers a factory in an init function (a wasip1 c-shared module runs
// initialisers, never main). The factory gets the operator's config and may
// reject it. A complete condition that retries every 429 after the
// server's Retry-After, switching to a model named in its config:
//
//	package main
//
//	import (
//		"errors"
//
//		"github.com/retryhost/retryhost/abi"
//		"github.com/retryhost/retryhost/plugins/sdk/condition"
//	)
//
//	func init() {
//		condition.Register(func(config []byte) (condition.Decider, error) {
//			model := string(config)
//			if model == "" {
//				return nil, errors.New("config: the fallback model is required")
//			}
//			return condition.Func(func(a *abi.Attempt) (abi.Decision, error) {
//				switch {
//				case a.Status == 429 && a.Number < 3:
//					return abi.Decision{Action: abi.ActionRetry, UseRetryAfter: true, MaxAttempts: 3}, nil
//				case a.Status == 429:
//					return abi.Decision{Action: abi.ActionSwitch, Model: model}, nil
//				}
//				return abi.Decision{}, nil // no opinion
//			}), nil
//		})
//	}
//
//	func main() {}
//
// Build it (reproducibly: the same source gives the same bytes):
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -ldflags=-buildid= -o rule.wasm .
//
// Test it natively: the plugin's logic is plain Go, so `go test` in its
// package runs it without Wasm, and [Load] drives it through the same
// byte-level dispatch the Wasm exports use (records encoded and decoded as
// the host does), so a native test also checks what crosses the boundary.
//
// Rules for guests: keep no state in a condition between calls; keep a
// transform's per-stream state in its Stream; a Part is valid only during
// the call; never start goroutines that outlive an export; clocks and
// randomness in the sandbox are fake, so decide on the Attempt's fields.
// plugins/README.md is the author's guide.
//
// What a transform can rely on (ABI v1.3, abi/ABI.md §6.4, §8.4, §8.6, §8.7):
// the finish part is always last (passing it holds it until End, so a
// list End returns goes out before it); an empty REPLACE list discards the
// held content and the part and emits nothing; a REPLACE (or DROP) of the
// provider's error part emits the list and keeps the error, which still
// fails the attempt; an empty text, reasoning or tool-input delta is a
// heartbeat and counts for no hold cap; a part's payload is at most
// abi.MaxPartSize (16 MiB): a larger one never reaches the guest (the
// stream fails with the host's limit error and the fail policy applies).
package sdk

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"
)

// DecodeJSON parses a JSON config into v (a pointer to a struct),
// strictly, so an operator's typo fails the load instead of being ignored:
//   - an unknown field is an error, and a key must spell its field's name
//     exactly (encoding/json alone would match any case);
//   - a key may appear once per object (encoding/json would keep the last);
//   - null is not a value (encoding/json would ignore it): leave the field
//     out instead;
//   - the config must be valid UTF-8 (encoding/json would replace invalid
//     bytes with U+FFFD).
//
// An empty config, or one of JSON white space only, leaves v as it is (the
// defaults). Use it in a factory, at load only: it allocates. The built-in
// plugins' C builds read their configs by the same rules (plugins/c/json.h),
// so both builds of a plugin accept exactly the same configs.
//
// It is built on json.Unmarshal rather than json.Decoder on purpose: a
// Decoder reads through an io.Reader, which makes the linker keep
// os.(*File).Read and with it the WASI import fd_read, which the host
// forbids.
func DecodeJSON(config []byte, v any) error {
	if len(bytes.Trim(config, " \t\r\n")) == 0 {
		return nil
	}
	if !utf8.Valid(config) {
		return errors.New("config: not valid UTF-8")
	}
	if err := json.Unmarshal(config, v); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if err := checkKeys(config); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	var tree any
	if err := json.Unmarshal(config, &tree); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if err := checkFields(tree, reflect.TypeOf(v), ""); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	return nil
}

// checkKeys reports a null or a key repeated within one object, in a
// document json.Unmarshal has already found valid (a decoded map cannot
// show either).
func checkKeys(doc []byte) error {
	i := 0
	var value func(path string) error
	skipWS := func() {
		for i < len(doc) && (doc[i] == ' ' || doc[i] == '\t' || doc[i] == '\n' || doc[i] == '\r') {
			i++
		}
	}
	str := func() (string, error) {
		start := i
		for i++; doc[i] != '"'; i++ {
			if doc[i] == '\\' {
				i++
			}
		}
		i++
		var s string
		err := json.Unmarshal(doc[start:i], &s)
		return s, err
	}
	value = func(path string) error {
		skipWS()
		switch doc[i] {
		case '{':
			i++
			seen := map[string]bool{}
			for {
				skipWS()
				if doc[i] == '}' {
					i++
					return nil
				}
				if doc[i] == ',' {
					i++
					skipWS()
				}
				k, err := str()
				if err != nil {
					return err
				}
				if seen[k] {
					return fmt.Errorf("json: duplicate field %q", strings.TrimPrefix(path+"."+k, "."))
				}
				seen[k] = true
				skipWS()
				i++ // ':'
				if err := value(path + "." + k); err != nil {
					return err
				}
			}
		case '[':
			i++
			for n := 0; ; n++ {
				skipWS()
				if doc[i] == ']' {
					i++
					return nil
				}
				if doc[i] == ',' {
					i++
				}
				if err := value(path + "[" + strconv.Itoa(n) + "]"); err != nil {
					return err
				}
			}
		case '"':
			_, err := str()
			return err
		case 'n':
			return fmt.Errorf("json: %q: null is not a value: leave the field out", strings.TrimPrefix(path, "."))
		default:
			for i < len(doc) && !strings.ContainsRune(",]} \t\r\n", rune(doc[i])) {
				i++
			}
			return nil
		}
	}
	return value("")
}

// checkFields reports the first object key in tree that t has no field for.
func checkFields(tree any, t reflect.Type, path string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch x := tree.(type) {
	case map[string]any:
		switch t.Kind() {
		case reflect.Map:
			for k, sub := range x {
				if err := checkFields(sub, t.Elem(), path+"."+k); err != nil {
					return err
				}
			}
		case reflect.Struct:
			for k, sub := range x {
				f, ok := field(t, k)
				if !ok {
					return fmt.Errorf("json: unknown field %q", strings.TrimPrefix(path+"."+k, "."))
				}
				if err := checkFields(sub, f.Type, path+"."+k); err != nil {
					return err
				}
			}
		}
	case []any:
		if t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
			for i, sub := range x {
				if err := checkFields(sub, t.Elem(), path+"["+strconv.Itoa(i)+"]"); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// field finds the struct field encoding/json would fill for key: its json
// tag name, else its name, spelt exactly (DecodeJSON is stricter than
// encoding/json, which ignores case).
func field(t reflect.Type, key string) (reflect.StructField, bool) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if name == key {
			return f, true
		}
	}
	return reflect.StructField{}, false
}
