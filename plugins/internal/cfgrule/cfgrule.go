// Package cfgrule holds the value rules the built-in plugins' Go builds
// share with their C builds (plugins/c/json.h), so both builds of a plugin
// accept exactly the same configs and read the same values from them. It is
// imported by the Go guests only.
package cfgrule

import (
	"bytes"
	"errors"
	"strconv"
	"time"
)

// MaxCap is the largest hold cap a config may give (a u32 in the Policy
// record, kept within an int32 for every host).
const MaxCap = 1<<31 - 1

// MaxDuration is the longest duration string, in bytes.
const MaxDuration = 64

// Duration parses a non-negative Go duration ("500ms", "1.5s"); "" is 0.
func Duration(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	if len(s) > MaxDuration {
		return 0, errors.New("too long")
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, errors.New("bad")
	}
	return d, nil
}

// Factor is a number both builds convert to the same float64: at most 15
// significant digits and, once they are read as an integer, a decimal
// exponent within ±22 (1.5, 2, 0.25, 1e3), so the value is one correctly
// rounded IEEE operation in C and what strconv.ParseFloat gives in Go.
type Factor float64

// UnmarshalJSON implements json.Unmarshaler.
func (f *Factor) UnmarshalJSON(b []byte) error {
	if len(b) == 0 || !(b[0] == '-' || b[0] >= '0' && b[0] <= '9') {
		return errors.New("want a number")
	}
	if !exactDecimal(b) {
		return errors.New("want a number with at most 15 significant digits and a small exponent, such as 1.5")
	}
	v, err := strconv.ParseFloat(string(b), 64)
	if err != nil {
		return err
	}
	*f = Factor(v)
	return nil
}

// exactDecimal applies Factor's rule to a JSON number literal, as json.h's
// factor does.
func exactDecimal(b []byte) bool {
	mant, exp, _ := bytes.Cut(bytes.ToLower(b), []byte("e"))
	digits, zeros := 0, 0
	e := 0
	point := false
	nonzero := false
	for _, c := range mant {
		switch {
		case c == '-':
			continue
		case c == '.':
			point = true
			continue
		}
		if point {
			e--
		}
		if c == '0' {
			if digits > 0 {
				zeros++
			}
			continue
		}
		nonzero = true
		digits += zeros + 1
		zeros = 0
		if digits > 15 {
			return false
		}
	}
	e += zeros
	if len(exp) > 0 {
		neg := exp[0] == '-'
		if exp[0] == '-' || exp[0] == '+' {
			exp = exp[1:]
		}
		x := 0
		for _, c := range exp {
			if x < 1000000 {
				x = x*10 + int(c-'0')
			}
		}
		if neg {
			x = -x
		}
		e += x
	}
	return !nonzero || (e >= -22 && e <= 22)
}

// MaxConfig is the longest config, in bytes (the C builds' buffer).
const MaxConfig = 65536

// Size rejects a config longer than MaxConfig.
func Size(config []byte) error {
	if len(config) > MaxConfig {
		return errors.New("config: longer than 65536 bytes")
	}
	return nil
}
