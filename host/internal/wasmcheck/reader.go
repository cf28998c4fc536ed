package wasmcheck

import "fmt"

// reader is a bounds-checked cursor over a byte slice; base is the offset
// of b[0] in the module, for error positions.
type reader struct {
	b    []byte
	off  int
	base int
}

func (r *reader) more() bool { return r.off < len(r.b) }

func (r *reader) fail(msg string) error { return &FormatError{Offset: r.base + r.off, Msg: msg} }

// short is fail for a read or a length past the end of the bytes.
func (r *reader) short(msg string) error {
	return &FormatError{Offset: r.base + r.off, Msg: msg, Short: true}
}

func (r *reader) byte() (byte, error) {
	if r.off >= len(r.b) {
		return 0, r.short("unexpected end")
	}
	b := r.b[r.off]
	r.off++
	return b, nil
}

// bytes returns the next n bytes (a view).
func (r *reader) bytes(n uint64) ([]byte, error) {
	if n > uint64(len(r.b)-r.off) {
		return nil, r.short(fmt.Sprintf("%d bytes declared, %d left", n, len(r.b)-r.off))
	}
	s := r.b[r.off : r.off+int(n)]
	r.off += int(n)
	return s, nil
}

// sub returns a reader over the next size bytes, which keeps their
// offsets in the module for error positions.
func (r *reader) sub(size uint32) (reader, error) {
	start := r.off
	b, err := r.bytes(uint64(size))
	if err != nil {
		return reader{}, err
	}
	return reader{b: b, base: r.base + start}, nil
}

// section reads a section's (or a name subsection's) id and size and
// returns a reader over its payload.
func (r *reader) section() (byte, reader, error) {
	id, err := r.byte()
	if err != nil {
		return 0, reader{}, err
	}
	size, err := r.u32()
	if err != nil {
		return 0, reader{}, err
	}
	payload, err := r.sub(size)
	return id, payload, err
}

// u32 reads an unsigned LEB128 of at most 5 bytes.
func (r *reader) u32() (uint32, error) {
	var v uint64
	for i := range 5 {
		b, err := r.byte()
		if err != nil {
			return 0, err
		}
		v |= uint64(b&0x7f) << (7 * i)
		if b&0x80 == 0 {
			if v > 1<<32-1 {
				return 0, r.fail("integer too large")
			}
			return uint32(v), nil
		}
	}
	return 0, r.fail("integer representation too long")
}

// sleb skips a signed LEB128 of at most max bytes.
func (r *reader) sleb(max int) (int, error) {
	for i := range max {
		b, err := r.byte()
		if err != nil {
			return 0, err
		}
		if b&0x80 == 0 {
			return i + 1, nil
		}
	}
	return 0, r.fail("integer representation too long")
}

// s33 skips a block type: an empty type, a value type or a type index, all
// read as a signed LEB128 of at most 5 bytes.
func (r *reader) s33() (int, error) { return r.sleb(5) }

// count reads a vector's length and refuses one its bytes cannot hold
// (each element takes at least size bytes). wazero allocates a vector by
// its declared length before reading it: a few bytes declaring 2^32
// globals would otherwise be a multi-gigabyte allocation.
func (r *reader) count(size int) (uint32, error) {
	n, err := r.u32()
	if err != nil {
		return 0, err
	}
	if uint64(n)*uint64(size) > uint64(len(r.b)-r.off) {
		return 0, r.short(fmt.Sprintf("vector of %d declared, %d bytes left", n, len(r.b)-r.off))
	}
	return n, nil
}

// byteVec reads a vector of bytes (a name, or a type's value types): its
// length, checked like any vector's, then the bytes (a view).
func (r *reader) byteVec() ([]byte, error) {
	n, err := r.count(1)
	if err != nil {
		return nil, err
	}
	return r.bytes(uint64(n))
}
