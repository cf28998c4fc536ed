// Package wasmgen builds WebAssembly binaries too large or too regular to
// commit as WAT: the load-time bombs of the host's hostile tests (200,000
// exports, 100,000 nested blocks, a 60 MB data segment). Test use only.
package wasmgen

import (
	"bytes"
	"strings"
)

// LEB appends v as an unsigned LEB128.
func LEB(b []byte, v uint64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v == 0 {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

// Section appends a section with its id and size.
func Section(b []byte, id byte, payload []byte) []byte {
	b = append(b, id)
	b = LEB(b, uint64(len(payload)))
	return append(b, payload...)
}

func name(b []byte, s string) []byte { return append(LEB(b, uint64(len(s))), s...) }

// Header is the magic and version of a WebAssembly 1.0 binary.
const Header = "\x00asm\x01\x00\x00\x00"

// oneFunc is a module with one type () -> () and n functions of it.
func funcs(n int) []byte {
	m := []byte(Header)
	m = Section(m, 1, []byte{1, 0x60, 0, 0})
	fs := LEB(nil, uint64(n))
	for range n {
		fs = append(fs, 0)
	}
	return Section(m, 3, fs)
}

// code appends a code section holding the bodies.
func code(m []byte, bodies ...[]byte) []byte {
	c := LEB(nil, uint64(len(bodies)))
	for _, b := range bodies {
		c = LEB(c, uint64(len(b)))
		c = append(c, b...)
	}
	return Section(m, 10, c)
}

// Exports is a module with one empty function exported n times.
func Exports(n int) []byte {
	m := funcs(1)
	e := LEB(nil, uint64(n))
	buf := make([]byte, 0, 16)
	for i := range n {
		buf = LEB(buf[:0], uint64(i))
		e = name(e, "e"+string(hex(buf)))
		e = append(e, 0, 0)
	}
	m = Section(m, 7, e)
	return code(m, []byte{0, 0x0b})
}

func hex(b []byte) []byte {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = append(out, digits[c>>4], digits[c&15])
	}
	return out
}

// Nested is a module of fns functions, each depth blocks deep.
func Nested(fns, depth int) []byte {
	body := make([]byte, 0, 3*depth+2)
	body = append(body, 0)
	for range depth {
		body = append(body, 0x02, 0x40)
	}
	for range depth {
		body = append(body, 0x0b)
	}
	body = append(body, 0x0b)
	bodies := make([][]byte, fns)
	for i := range bodies {
		bodies[i] = body
	}
	return code(funcs(fns), bodies...)
}

// Data is a module with a memory and one active data segment of n bytes
// (zeros) at address 0.
func Data(n int) []byte {
	m := []byte(Header)
	pages := uint64(n+65535) / 65536
	mem := LEB([]byte{1, 0}, pages)
	m = Section(m, 5, mem)
	d := []byte{1, 0, 0x41, 0, 0x0b}
	d = LEB(d, uint64(n))
	d = append(d, make([]byte, n)...)
	return Section(m, 11, d)
}

// Locals is a module with one function declaring n i32 locals.
func Locals(n uint32) []byte { return ManyLocals(1, n) }

// ManyLocals is a module of fns functions, each declaring n i32 locals.
func ManyLocals(fns int, n uint32) []byte {
	body := LEB([]byte{1}, uint64(n))
	body = append(body, 0x7f, 0x0b)
	bodies := make([][]byte, fns)
	for i := range bodies {
		bodies[i] = body
	}
	return code(funcs(fns), bodies...)
}

// Types is a module of n function types (distinct parameter lists).
func Types(n int) []byte {
	p := LEB(nil, uint64(n))
	for i := range n {
		p = append(p, 0x60, 1, byte(0x7c+i%4), 0)
	}
	return Section([]byte(Header), 1, p)
}

// Globals is a module of n immutable i32 globals.
func Globals(n int) []byte {
	p := LEB(nil, uint64(n))
	for range n {
		p = append(p, 0x7f, 0, 0x41, 0, 0x0b)
	}
	return Section([]byte(Header), 6, p)
}

// DataSegments is a module with a memory and n empty passive data segments.
func DataSegments(n int) []byte {
	m := Section([]byte(Header), 5, []byte{1, 0, 1})
	p := LEB(nil, uint64(n))
	for range n {
		p = append(p, 1, 0)
	}
	return Section(m, 11, p)
}

// Elements is a module with one function and a passive element segment
// of n references to it.
func Elements(n int) []byte {
	m := funcs(1)
	p := LEB([]byte{1, 1, 0}, uint64(n))
	for range n {
		p = append(p, 0)
	}
	m = Section(m, 9, p)
	return code(m, []byte{0, 0x0b})
}

// Names is a module whose "name" section names n functions.
func Names(n int) []byte {
	sub := LEB(nil, uint64(n))
	for i := range n {
		sub = LEB(sub, uint64(i))
		sub = name(sub, "f")
	}
	p := name(nil, "name")
	p = append(p, 1)
	p = LEB(p, uint64(len(sub)))
	p = append(p, sub...)
	return Section([]byte(Header), 0, p)
}

// typedFuncs is a module with one type (i32) -> () and n functions of it.
func typedFuncs(n int) []byte {
	m := []byte(Header)
	m = Section(m, 1, []byte{1, 0x60, 1, 0x7f, 0})
	fs := LEB(nil, uint64(n))
	for range n {
		fs = append(fs, 0)
	}
	return Section(m, 3, fs)
}

// SiblingBranchFuncs is a module of fns functions like SiblingBranches(n)'s
// one: each within per-function limits, the whole slow to compile.
func SiblingBranchFuncs(fns, n int) []byte {
	body := []byte{0}
	for range n {
		body = append(body, 0x02, 0x40, 0x20, 0, 0x0d, 1, 0x0b)
	}
	body = append(body, 0x0b)
	bodies := make([][]byte, fns)
	for i := range bodies {
		bodies[i] = body
	}
	return code(typedFuncs(fns), bodies...)
}

// SiblingBranches is a module of one function (i32) -> () holding n
// sibling blocks, each with a br_if to the function's outer label: every
// branch is one more edge into the function's exit, which wazero's
// optimising compiler handles in more than linear time.
func SiblingBranches(n int) []byte {
	body := []byte{0}
	for range n {
		body = append(body, 0x02, 0x40, 0x20, 0, 0x0d, 1, 0x0b) // block; local.get 0; br_if 1; end
	}
	body = append(body, 0x0b)
	return code(typedFuncs(1), body)
}

// BrTables is a module of one function (i32) -> () holding tables
// sibling blocks, each with a br_table of targets labels that all leave
// the block.
func BrTables(tables, targets int) []byte {
	body := []byte{0}
	for range tables {
		body = append(body, 0x02, 0x40, 0x20, 0, 0x0e)
		body = LEB(body, uint64(targets))
		for i := range targets {
			body = append(body, byte(i&1)) // label 0 (this block) or 1 (the function)
		}
		body = append(body, 0, 0x0b)
	}
	body = append(body, 0x0b)
	return code(typedFuncs(1), body)
}

// WideTypes is a module of n function types, each with params parameters
// and results results of type i32.
func WideTypes(n, params, results int) []byte {
	p := LEB(nil, uint64(n))
	for range n {
		p = append(p, 0x60)
		p = LEB(p, uint64(params))
		p = append(p, bytes.Repeat([]byte{0x7f}, params)...)
		p = LEB(p, uint64(results))
		p = append(p, bytes.Repeat([]byte{0x7f}, results)...)
	}
	return Section([]byte(Header), 1, p)
}

// BrIfs is a module of one function (i32) -> () holding n br_ifs to its
// outer label, in no block.
func BrIfs(n int) []byte {
	body := []byte{0}
	for range n {
		body = append(body, 0x20, 0, 0x0d, 0) // local.get 0; br_if 0
	}
	return Code1(append(body, 0x0b))
}

// Code1 is a module of one function (i32) -> () with the given body.
func Code1(body []byte) []byte { return code(typedFuncs(1), body) }

// StripCustom returns a copy of the module m without its custom sections
// whose name starts with prefix (".debug_" drops the DWARF), the other
// sections byte for byte, so code offsets are unchanged. m must be a
// well-formed binary: it panics on a truncated one.
func StripCustom(m []byte, prefix string) []byte {
	out := append([]byte(nil), m[:len(Header)]...)
	for rest := m[len(Header):]; len(rest) > 0; {
		size, n := uleb(rest[1:])
		end := 1 + n + int(size)
		if rest[0] == 0 {
			nameLen, k := uleb(rest[1+n:])
			name := rest[1+n+k : 1+n+k+int(nameLen)]
			if strings.HasPrefix(string(name), prefix) {
				rest = rest[end:]
				continue
			}
		}
		out = append(out, rest[:end]...)
		rest = rest[end:]
	}
	return out
}

// uleb decodes an unsigned LEB128 and returns it with its length.
func uleb(b []byte) (uint64, int) {
	var v uint64
	for i, c := range b {
		v |= uint64(c&0x7f) << (7 * i)
		if c&0x80 == 0 {
			return v, i + 1
		}
	}
	panic("wasmgen: truncated LEB128")
}
