package wasmcheck

import "fmt"

// expr walks instructions up to the end that closes the expression,
// tracking the nesting depth and the number of blocks and of branches,
// and marks the tables the code
// grows. It decodes the immediates of every instruction of the features
// the host enables (wazero's CoreFeaturesV2: the 1.0 set, sign extension,
// non-trapping conversions, multi-value, bulk memory, reference types and
// 128-bit SIMD); any other opcode is malformed for this host.
func (c *checker) expr() error {
	var depth uint64
	for {
		op, err := c.r.byte()
		if err != nil {
			return err
		}
		switch imm[op] {
		case immNone:
		case immBlock: // block, loop, if: a block type
			if _, err := c.r.s33(); err != nil {
				return err
			}
			depth++
			c.info.MaxNesting = max(c.info.MaxNesting, depth)
			if err := c.over("Nesting", depth, c.lim.Nesting); err != nil {
				return err
			}
			c.info.MaxBlocks++
			if err := c.over("Blocks", c.info.MaxBlocks, c.lim.Blocks); err != nil {
				return err
			}
		case immEnd:
			if depth == 0 {
				return nil
			}
			depth--
		case immIndex:
			_, err = c.r.u32()
			if err == nil && (op == 0x0C || op == 0x0D) { // br, br_if
				c.jumps++
				err = c.tally("Branches", &c.info.Branches, 1, c.lim.Branches)
			}
		case immMemarg:
			err = c.memarg()
		case immI32:
			_, err = c.r.sleb(5)
		case immI64:
			_, err = c.r.sleb(10)
		case immF32:
			_, err = c.r.bytes(4)
		case immF64:
			_, err = c.r.bytes(8)
		case immByte:
			_, err = c.r.byte()
		case immBrTable: // a vector of labels and a default
			var n uint32
			if n, err = c.r.u32(); err == nil {
				if err = c.tally("Branches", &c.info.Branches, uint64(n)+1, c.lim.Branches); err != nil {
					return err
				}
				for range uint64(n) + 1 {
					if _, err = c.r.u32(); err != nil {
						break
					}
				}
			}
		case immCallIndirect: // type, table
			if _, err = c.r.u32(); err == nil {
				_, err = c.r.u32()
			}
		case immSelectT: // a vector of value types
			var n uint32
			if n, err = c.r.u32(); err == nil {
				_, err = c.r.bytes(uint64(n))
			}
		case immMisc:
			err = c.miscOp()
		case immSIMD:
			err = c.simdOp()
		default:
			return c.r.fail(fmt.Sprintf("unknown opcode %#x", op))
		}
		if err != nil {
			return err
		}
	}
}

// The immediates an opcode takes.
const (
	immInvalid = iota
	immNone
	immBlock
	immEnd
	immIndex // one u32: an index or memory.size/grow's memory
	immMemarg
	immI32
	immI64
	immF32
	immF64
	immByte // ref.null's reference type
	immBrTable
	immCallIndirect
	immSelectT
	immMisc // the 0xFC prefix
	immSIMD // the 0xFD prefix
)

// imm maps every one-byte opcode to its immediates (invalid if unknown).
var imm = func() (t [256]uint8) {
	set := func(kind uint8, ops ...int) {
		for _, op := range ops {
			t[op] = kind
		}
	}
	// unreachable, nop, else, return, drop, select, ref.is_null
	set(immNone, 0x00, 0x01, 0x05, 0x0F, 0x1A, 0x1B, 0xD1)
	for op := 0x45; op <= 0xC4; op++ { // numeric, sign extension
		t[op] = immNone
	}
	set(immBlock, 0x02, 0x03, 0x04)
	set(immEnd, 0x0B)
	// br, br_if, call, local.get/set/tee, global.get/set, table.get/set,
	// memory.size/grow, ref.func
	set(immIndex, 0x0C, 0x0D, 0x10, 0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x3F, 0x40, 0xD2)
	for op := 0x28; op <= 0x3E; op++ { // loads and stores
		t[op] = immMemarg
	}
	set(immI32, 0x41)
	set(immI64, 0x42)
	set(immF32, 0x43)
	set(immF64, 0x44)
	set(immByte, 0xD0)
	set(immBrTable, 0x0E)
	set(immCallIndirect, 0x11)
	set(immSelectT, 0x1C)
	set(immMisc, 0xFC)
	set(immSIMD, 0xFD)
	return t
}()

func (c *checker) memarg() error {
	if _, err := c.r.u32(); err != nil { // alignment
		return err
	}
	_, err := c.r.u32() // offset
	return err
}

// miscOp decodes the 0xFC prefix: saturating conversions, bulk memory and
// the table instructions of reference types.
func (c *checker) miscOp() error {
	sub, err := c.r.u32()
	if err != nil {
		return err
	}
	imms := 0
	switch {
	case sub <= 7: // trunc_sat
	case sub == 9 || sub == 11 || sub == 13 || sub == 16 || sub == 17:
		// data.drop, memory.fill, elem.drop, table.size, table.fill
		imms = 1
	case sub == 8 || sub == 10 || sub == 12 || sub == 14:
		// memory.init, memory.copy, table.init, table.copy
		imms = 2
	case sub == 15: // table.grow
		t, err := c.r.u32()
		if err != nil {
			return err
		}
		if uint64(t) >= uint64(len(c.tables)) {
			return c.r.fail(fmt.Sprintf("table.grow on table %d of %d", t, len(c.tables)))
		}
		c.tables[t].grown = true
	default:
		return c.r.fail(fmt.Sprintf("unknown opcode 0xfc %d", sub))
	}
	for range imms {
		if _, err := c.r.u32(); err != nil {
			return err
		}
	}
	return nil
}

// simdOp decodes the 0xFD prefix (fixed-width SIMD).
func (c *checker) simdOp() error {
	sub, err := c.r.u32()
	if err != nil {
		return err
	}
	switch {
	case sub <= 0x0B || sub == 0x5C || sub == 0x5D: // loads, store, load_zero
		return c.memarg()
	case sub == 0x0C || sub == 0x0D: // v128.const, i8x16.shuffle
		_, err = c.r.bytes(16)
	case sub >= 0x15 && sub <= 0x22: // extract_lane, replace_lane
		_, err = c.r.byte()
	case sub >= 0x54 && sub <= 0x5B: // load_lane, store_lane
		if err = c.memarg(); err == nil {
			_, err = c.r.byte()
		}
	case sub <= 0xFF:
		// everything else of SIMD has no immediate
	default:
		return c.r.fail(fmt.Sprintf("unknown opcode 0xfd %d", sub))
	}
	return err
}
