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
package sdk

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
)

// DecodeJSON parses a JSON config into v (a pointer to a struct),
// strictly: unknown fields are errors, so an operator's typo fails the
// load instead of being ignored. An empty or blank config leaves v as it
// is (the defaults). Use it in a factory, at load only: it allocates.
//
// It is built on json.Unmarshal rather than json.Decoder on purpose: a
// Decoder reads through an io.Reader, which makes the linker keep
// os.(*File).Read and with it the WASI import fd_read, which the host
// forbids.
func DecodeJSON(config []byte, v any) error {
	if len(bytes.TrimSpace(config)) == 0 {
		return nil
	}
	if err := json.Unmarshal(config, v); err != nil {
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
// tag name, else its name, case-insensitively.
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
		if strings.EqualFold(name, key) {
			return f, true
		}
	}
	return reflect.StructField{}, false
}
