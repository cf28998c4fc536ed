// Package wasmcheck is a cheap pre-parse of a WebAssembly binary, run before
// wazero decodes and compiles it. wazero's own decoder and compiler are not
// linear in every input (an export listing is quadratic in the number of
// exports, a compile in the nesting depth of blocks) and allocate what a
// module declares; this reader walks the sections once, allocates nothing
// that the module's counts choose, and refuses a module past an operator's
// limit before any of that work starts.
//
// It is deliberately not a validator: it decodes only what a limit needs
// (counts, sizes, the instruction stream's block structure) and leaves
// everything else to wazero. Where it decodes, it must agree with wazero on
// every module wazero accepts, so that a limit is never computed on
// misread bytes; a module it cannot read is malformed and wazero would
// refuse it too.
//
// Every loop consumes at least one byte of input or fails, so the time is
// linear in the module's size; nothing panics (fuzzed by FuzzCheck).
package wasmcheck

import (
	"errors"
	"fmt"
)

// Limits bounds what a module may declare. Zero means no limit for that
// field (the host always sets every field).
type Limits struct {
	ModuleBytes  uint64 // size of the binary
	Functions    uint64 // imported and defined functions
	Imports      uint64 // imports of any kind
	Exports      uint64 // exports of any kind
	DataBytes    uint64 // bytes of all data segments together
	BodyBytes    uint64 // bytes of one function body
	Nesting      uint64 // nesting depth of blocks, loops and ifs in one body
	Locals       uint64 // declared locals of one function
	AllLocals    uint64 // declared locals of all functions together
	Tables       uint64 // imported and defined tables
	TableEntries uint64 // entries all tables can ever hold together
	Types        uint64 // function types
	Globals      uint64 // imported and defined globals
	DataSegments uint64 // data segments
	Elements     uint64 // element segments and their items together
	Names        uint64 // entries of the "name" section's function and local maps
	// Blocks: blocks, loops and ifs in one function body (wazero's
	// optimising compiler is super-linear in them: 2,000 sibling blocks
	// that branch to the function's exit compile in 0.25 s, 16,000 in 27 s).
	Blocks uint64
	// Branches: br and br_if instructions and br_table labels of one
	// function body together. Each is an edge of the function's control
	// flow graph, and wazero's compiler is quadratic in them (32,000
	// br_ifs in one function took 22 s) and spends about 2.4 KB on each
	// br_table label.
	Branches uint64
	// Params and Results: parameters and results of one function type.
	Params  uint64
	Results uint64
	// TypeBytes: size of the type section.
	TypeBytes uint64
	// CompileWork: the sum over all function bodies of their compile
	// cost, quadratic in a body's blocks and in its br and br_if
	// instructions (see compileWork). Blocks, Branches and Nesting bound
	// one body, but nothing else bounds how many such bodies a module
	// has: 400 bodies of 2,000 sibling blocks, each with a br_if out,
	// took 34 s of CPU; 2,700 bodies of 2,048 empty blocks, 46 s.
	CompileWork uint64
}

// LimitError says which limit a module exceeds. Limit names the Limits
// field; Got may be a lower bound (the reader stops at the first excess).
type LimitError struct {
	Limit string
	Got   uint64
	Max   uint64
	// Where locates the excess ("function 12", "table 0"), or is empty.
	Where string
}

func (e *LimitError) Error() string {
	if e.Where == "" {
		return fmt.Sprintf("%s: %d exceeds the limit of %d", e.Limit, e.Got, e.Max)
	}
	return fmt.Sprintf("%s: %s: %d exceeds the limit of %d", e.Limit, e.Where, e.Got, e.Max)
}

// ErrStartSection: the module has a start section, a function wazero runs
// inside instantiation, before the host can put a deadline on it.
var ErrStartSection = errors.New("module has a start section")

// FormatError: the binary is not a module this reader can walk; wazero
// would refuse it too.
type FormatError struct {
	Offset int
	Msg    string
	// Short: a length, a count or a read runs past the end of its
	// section. wazero, which reads vectors past a section's end and
	// allocates a vector by its declared length before reading it, can
	// exhaust the host's memory on such a module (FuzzCheck found a 60-byte
	// one): the pre-parse is what keeps it from wazero.
	Short bool
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("malformed module at byte %d: %s", e.Offset, e.Msg)
}

// Info is what the pre-parse learned, for tests and diagnostics.
type Info struct {
	Functions    uint64
	Imports      uint64
	Exports      uint64
	DataBytes    uint64
	MaxBody      uint64
	MaxNesting   uint64
	MaxLocals    uint64
	AllLocals    uint64
	Tables       uint64
	TableEntries uint64
	Types        uint64
	Globals      uint64
	DataSegments uint64
	Elements     uint64
	Names        uint64
	// MaxBlocks is the most blocks, loops and ifs of one body;
	// Branches the most branches of one body; MaxParams and
	// MaxResults the widest function type; TypeBytes the type section's
	// size.
	MaxBlocks  uint64
	Branches   uint64
	MaxParams  uint64
	MaxResults uint64
	TypeBytes  uint64
	// CompileWork is the module's total of the cost Limits.CompileWork
	// bounds.
	CompileWork uint64
}

const (
	secCustom   = 0
	secType     = 1
	secImport   = 2
	secFunction = 3
	secTable    = 4
	secMemory   = 5
	secGlobal   = 6
	secExport   = 7
	secStart    = 8
	secElement  = 9
	secCode     = 10
	secData     = 11
	// secTagSection is exception handling's, an experimental feature the
	// host leaves off; its length is checked all the same.
	secTagSection = 13
)

// table is what a limit needs of one table.
type table struct {
	min, max uint64
	hasMax   bool
	grown    bool
}

type checker struct {
	r      reader
	lim    Limits
	info   Info
	tables []table
	// where locates an excess: a kind ("table", "function body") and an
	// index, formatted only for an error.
	where    string
	whereIdx int
	// jumps counts the br and br_if instructions of the body being walked.
	jumps uint64
}

// Check walks b and returns what it learned, or the first limit exceeded
// (*LimitError), ErrStartSection, or a *FormatError. A table the code
// grows must declare a maximum (wazero's table.grow stops there), even
// with no TableEntries limit.
func Check(b []byte, lim Limits) (Info, error) {
	c := &checker{r: reader{b: b}, lim: lim}
	err := c.module()
	return c.info, err
}

func (c *checker) over(limit string, got, max uint64) error {
	if max == 0 || got <= max {
		return nil
	}
	e := &LimitError{Limit: limit, Got: got, Max: max}
	if c.where != "" {
		e.Where = fmt.Sprintf("%s %d", c.where, c.whereIdx)
	}
	return e
}

// tally adds n to a running total and checks it against its limit.
func (c *checker) tally(limit string, total *uint64, n, max uint64) error {
	*total += n
	return c.over(limit, *total, max)
}

// vector reads a vector's length (each element at least size bytes) and
// tallies it.
func (c *checker) vector(size int, limit string, total *uint64, max uint64) (uint32, error) {
	n, err := c.r.count(size)
	if err != nil {
		return 0, err
	}
	return n, c.tally(limit, total, uint64(n), max)
}

func (c *checker) module() error {
	if err := c.over("ModuleBytes", uint64(len(c.r.b)), c.lim.ModuleBytes); err != nil {
		return err
	}
	magic, err := c.r.bytes(8)
	if err != nil {
		return err
	}
	if string(magic) != "\x00asm\x01\x00\x00\x00" {
		return c.r.fail("not a WebAssembly 1.0 binary")
	}
	for c.r.more() {
		id, payload, err := c.r.section()
		if err != nil {
			return err
		}
		s := &checker{r: payload, lim: c.lim, info: c.info, tables: c.tables}
		if err := s.section(id); err != nil {
			return err
		}
		c.info, c.tables = s.info, s.tables
	}
	return c.tableTotals()
}

func (c *checker) section(id byte) error {
	switch id {
	case secType:
		return c.types()
	case secImport:
		return c.imports()
	case secFunction:
		_, err := c.vector(1, "Functions", &c.info.Functions, c.lim.Functions)
		return err
	case secTable:
		n, err := c.r.count(3)
		if err != nil {
			return err
		}
		if err := c.over("Tables", c.info.Tables+uint64(n), c.lim.Tables); err != nil {
			return err
		}
		for range n {
			if _, err := c.r.byte(); err != nil { // reftype
				return err
			}
			if err := c.table(); err != nil {
				return err
			}
		}
		return nil
	case secExport:
		_, err := c.vector(3, "Exports", &c.info.Exports, c.lim.Exports)
		return err
	case secStart:
		return ErrStartSection
	case secCode:
		return c.code()
	case secData:
		return c.data()
	case secGlobal:
		_, err := c.vector(4, "Globals", &c.info.Globals, c.lim.Globals)
		return err
	case secMemory, secTagSection:
		// Only the length matters: wazero allocates by it.
		_, err := c.r.count(2)
		return err
	case secElement:
		return c.elements()
	case secCustom:
		return c.custom()
	}
	// The data count and anything else: nothing a limit needs; wazero
	// decides whether it is valid.
	return nil
}

// types walks the type section: only function types (no GC rec groups)
// and the lengths of their parameter and result vectors.
func (c *checker) types() error {
	n, err := c.vector(3, "Types", &c.info.Types, c.lim.Types)
	if err != nil {
		return err
	}
	if err := c.tally("TypeBytes", &c.info.TypeBytes, uint64(len(c.r.b)), c.lim.TypeBytes); err != nil {
		return err
	}
	defer func() { c.where = "" }()
	for i := range n {
		form, err := c.r.byte()
		if err != nil {
			return err
		}
		if form != 0x60 {
			return c.r.fail(fmt.Sprintf("type form %#x", form))
		}
		c.where, c.whereIdx = "type", int(c.info.Types-uint64(n)+uint64(i))
		for j, limit := range [2]string{"Params", "Results"} {
			v, err := c.r.byteVec()
			if err != nil {
				return err
			}
			got, lim, most := uint64(len(v)), c.lim.Params, &c.info.MaxParams
			if j == 1 {
				lim, most = c.lim.Results, &c.info.MaxResults
			}
			*most = max(*most, got)
			if err := c.over(limit, got, lim); err != nil {
				return err
			}
		}
	}
	return nil
}

// elements walks the element segments: their mode, table, offset and the
// lengths of their vectors.
func (c *checker) elements() error {
	n, err := c.vector(2, "Elements", &c.info.Elements, c.lim.Elements)
	if err != nil {
		return err
	}
	for range n {
		flag, err := c.r.u32()
		if err != nil {
			return err
		}
		if flag > 7 {
			return c.r.fail(fmt.Sprintf("element segment flag %d", flag))
		}
		if flag&2 != 0 && flag&1 == 0 { // explicit table index
			if _, err := c.r.u32(); err != nil {
				return err
			}
		}
		if flag&1 == 0 { // active: an offset expression
			if err := c.expr(); err != nil {
				return err
			}
		}
		if flag&3 != 0 { // element kind or reference type
			if _, err := c.r.byte(); err != nil {
				return err
			}
		}
		l, err := c.r.count(1)
		if err != nil {
			return err
		}
		if err := c.tally("Elements", &c.info.Elements, uint64(l), c.lim.Elements); err != nil {
			return err
		}
		for range l {
			if flag&4 != 0 {
				err = c.expr()
			} else {
				_, err = c.r.u32()
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// custom walks a custom section; of those wazero decodes, only "name"
// declares vector lengths (function and local names).
func (c *checker) custom() error {
	name, err := c.r.byteVec()
	if err != nil || string(name) != "name" {
		return err
	}
	for c.r.more() {
		id, payload, err := c.r.section()
		if err != nil {
			return err
		}
		if err := c.nameSubsection(id, payload); err != nil {
			return err
		}
	}
	return nil
}

func (c *checker) imports() error {
	n, err := c.vector(4, "Imports", &c.info.Imports, c.lim.Imports)
	if err != nil {
		return err
	}
	for range n {
		for range 2 { // module and field names
			l, err := c.r.u32()
			if err != nil {
				return err
			}
			if _, err := c.r.bytes(uint64(l)); err != nil {
				return err
			}
		}
		kind, err := c.r.byte()
		if err != nil {
			return err
		}
		switch kind {
		case 0: // function: type index
			if _, err := c.r.u32(); err != nil {
				return err
			}
			if err := c.tally("Functions", &c.info.Functions, 1, c.lim.Functions); err != nil {
				return err
			}
		case 1: // table: reftype, limits
			if _, err := c.r.byte(); err != nil {
				return err
			}
			if err := c.over("Tables", c.info.Tables+1, c.lim.Tables); err != nil {
				return err
			}
			if err := c.table(); err != nil {
				return err
			}
		case 2: // memory: limits
			if err := c.limits(); err != nil {
				return err
			}
		case 3: // global: valtype, mutability
			if _, err := c.r.bytes(2); err != nil {
				return err
			}
			if err := c.tally("Globals", &c.info.Globals, 1, c.lim.Globals); err != nil {
				return err
			}
		default:
			return c.r.fail(fmt.Sprintf("unknown import kind %#x", kind))
		}
	}
	return nil
}

// limits skips a memory's limits (flags, min, optional max).
func (c *checker) limits() error {
	flag, err := c.r.byte()
	if err != nil {
		return err
	}
	if _, err := c.r.u32(); err != nil {
		return err
	}
	if flag&1 != 0 {
		_, err = c.r.u32()
	}
	return err
}

// table reads a table's limits and checks the declared sizes.
func (c *checker) table() error {
	flag, err := c.r.byte()
	if err != nil {
		return err
	}
	if flag > 1 {
		return c.r.fail(fmt.Sprintf("table limits flag %#x", flag))
	}
	min, err := c.r.u32()
	if err != nil {
		return err
	}
	t := table{min: uint64(min)}
	if flag == 1 {
		max, err := c.r.u32()
		if err != nil {
			return err
		}
		t.max, t.hasMax = uint64(max), true
	}
	c.where, c.whereIdx = "table", len(c.tables)
	defer func() { c.where = "" }()
	if err := c.over("TableEntries", t.min, c.lim.TableEntries); err != nil {
		return err
	}
	if err := c.over("TableEntries", t.max, c.lim.TableEntries); err != nil {
		return err
	}
	c.tables = append(c.tables, t) // at most lim.Tables: checked before
	c.info.Tables++
	return nil
}

// tableTotals checks what all tables can ever hold together: a table's
// declared maximum, or its minimum if the code never grows it.
func (c *checker) tableTotals() error {
	var total uint64
	for i, t := range c.tables {
		switch {
		case t.hasMax:
			total += t.max
		case t.grown:
			// table.grow may take it to 2^32-1 entries.
			return &LimitError{Limit: "TableEntries", Got: 1<<32 - 1, Max: c.lim.TableEntries,
				Where: fmt.Sprintf("table %d, grown by the code with no declared maximum", i)}
		default:
			total += t.min
		}
	}
	c.info.TableEntries = total
	return c.over("TableEntries", total, c.lim.TableEntries)
}

func (c *checker) code() error {
	n, err := c.r.count(2)
	if err != nil {
		return err
	}
	for i := range n {
		size, err := c.r.u32()
		if err != nil {
			return err
		}
		c.info.MaxBody = max(c.info.MaxBody, uint64(size))
		c.where, c.whereIdx = "function body", int(i)
		if err := c.over("BodyBytes", uint64(size), c.lim.BodyBytes); err != nil {
			return err
		}
		body, err := c.r.sub(size)
		if err != nil {
			return err
		}
		b := checker{r: body, lim: c.lim, tables: c.tables, where: c.where, whereIdx: c.whereIdx}
		if err := b.body(); err != nil {
			return err
		}
		c.info.MaxNesting = max(c.info.MaxNesting, b.info.MaxNesting)
		c.info.MaxBlocks = max(c.info.MaxBlocks, b.info.MaxBlocks)
		c.info.Branches = max(c.info.Branches, b.info.Branches)
		c.info.MaxLocals = max(c.info.MaxLocals, b.info.MaxLocals)
		if err := c.tally("AllLocals", &c.info.AllLocals, b.info.MaxLocals, c.lim.AllLocals); err != nil {
			return err
		}
		work := compileWork(b.info.MaxBlocks, b.jumps)
		if err := c.tally("CompileWork", &c.info.CompileWork, work, c.lim.CompileWork); err != nil {
			return err
		}
	}
	c.where = ""
	return nil
}

// body walks one function body: its locals, then its instructions to the
// final end.
func (c *checker) body() error {
	groups, err := c.r.count(2)
	if err != nil {
		return err
	}
	var locals uint64
	for range groups {
		n, err := c.r.u32()
		if err != nil {
			return err
		}
		if _, err := c.r.byte(); err != nil { // valtype
			return err
		}
		locals += uint64(n)
		if err := c.over("Locals", locals, c.lim.Locals); err != nil {
			return err
		}
	}
	c.info.MaxLocals = locals
	if err := c.expr(); err != nil {
		return err
	}
	if c.r.more() {
		return c.r.fail("bytes after the function's final end")
	}
	return nil
}

// data walks the data section: every segment's mode, offset expression
// and bytes.
func (c *checker) data() error {
	n, err := c.vector(2, "DataSegments", &c.info.DataSegments, c.lim.DataSegments)
	if err != nil {
		return err
	}
	for range n {
		flag, err := c.r.u32()
		if err != nil {
			return err
		}
		switch flag {
		case 0: // active, memory 0
			err = c.expr()
		case 1: // passive
		case 2: // active, explicit memory
			if _, err = c.r.u32(); err == nil {
				err = c.expr()
			}
		default:
			return c.r.fail(fmt.Sprintf("data segment flag %d", flag))
		}
		if err != nil {
			return err
		}
		l, err := c.r.u32()
		if err != nil {
			return err
		}
		if _, err := c.r.bytes(uint64(l)); err != nil {
			return err
		}
		if err := c.tally("DataBytes", &c.info.DataBytes, uint64(l), c.lim.DataBytes); err != nil {
			return err
		}
	}
	return nil
}

// nameSubsection checks the lengths in a subsection of "name": the module
// name (0), the function names (1), the local names (2). wazero reads the
// maps past a lying subsection size, so checking against the subsection's
// bytes is the stricter bound.
func (c *checker) nameSubsection(id byte, s reader) error {
	entries := func(n uint32) error {
		return c.tally("Names", &c.info.Names, uint64(n), c.lim.Names)
	}
	name := func() error {
		_, err := s.byteVec()
		return err
	}
	switch id {
	case 0:
		return name()
	case 1, 2:
	default:
		return nil
	}
	n, err := s.count(2)
	if err == nil {
		err = entries(n)
	}
	if err != nil {
		return err
	}
	for range n {
		if _, err := s.u32(); err != nil { // function index
			return err
		}
		if id == 1 {
			if err := name(); err != nil {
				return err
			}
			continue
		}
		m, err := s.count(2)
		if err == nil {
			err = entries(m)
		}
		if err != nil {
			return err
		}
		for range m {
			if _, err := s.u32(); err != nil { // local index
				return err
			}
			if err := name(); err != nil {
				return err
			}
		}
	}
	return nil
}

// compileWork is one body's cost to wazero's optimising compiler, in
// units of about 10 ns of CPU, from its blocks (blocks, loops and ifs)
// and jumps (br and br_if), fitted to measured compiles: about 9 µs a
// function, 1.7 µs a block, 4 ns a block squared, whether nested or
// sibling, and 9 ns for each jump squared and three times for each jump
// and block; each coefficient is rounded up. br_table labels and other
// instructions compile in about linear time and add nothing. A body's
// bytes bound both counts (a module held in memory has fewer than 2^31),
// so the result cannot overflow.
func compileWork(blocks, jumps uint64) uint64 {
	return 1024 + 256*(blocks+jumps) + blocks*blocks/2 + jumps*(jumps+3*blocks)
}
