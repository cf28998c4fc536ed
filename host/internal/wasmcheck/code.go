package wasmcheck

import "fmt"

// expr walks instructions up to the end that closes the expression,
// tracking the nesting depth of blocks, and marks the tables the code
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
		switch {
		case op == 0x02 || op == 0x03 || op == 0x04: // block, loop, if
			if _, err := c.r.s33(); err != nil { // block type
				return err
			}
			depth++
			c.info.MaxNesting = max(c.info.MaxNesting, depth)
			if err := c.over("Nesting", depth, c.lim.Nesting); err != nil {
				return err
			}
		case op == 0x0B: // end
			if depth == 0 {
				return nil
			}
			depth--
		case op <= 0x01 || op == 0x05 || op == 0x0F || op == 0x1A || op == 0x1B ||
			(op >= 0x45 && op <= 0xC4) || op == 0xD1:
			// unreachable, nop, else, return, drop, select, numeric
			// (with sign extension), ref.is_null: no immediate.
		case op == 0x0C || op == 0x0D || op == 0x10 || (op >= 0x20 && op <= 0x26) ||
			op == 0x3F || op == 0x40 || op == 0xD2:
			// br, br_if, call, local/global/table get/set/tee,
			// memory.size/grow (a memory index), ref.func: one index.
			if _, err := c.r.u32(); err != nil {
				return err
			}
		case op == 0x0E: // br_table: a vector of labels and a default
			n, err := c.r.u32()
			if err != nil {
				return err
			}
			for range uint64(n) + 1 {
				if _, err := c.r.u32(); err != nil {
					return err
				}
			}
		case op == 0x11: // call_indirect: type, table
			if _, err := c.r.u32(); err != nil {
				return err
			}
			if _, err := c.r.u32(); err != nil {
				return err
			}
		case op == 0x1C: // select with types: a vector of value types
			n, err := c.r.u32()
			if err != nil {
				return err
			}
			if _, err := c.r.bytes(uint64(n)); err != nil {
				return err
			}
		case op >= 0x28 && op <= 0x3E: // loads and stores: memarg
			if err := c.memarg(); err != nil {
				return err
			}
		case op == 0x41: // i32.const
			if _, err := c.r.sleb(5); err != nil {
				return err
			}
		case op == 0x42: // i64.const
			if _, err := c.r.sleb(10); err != nil {
				return err
			}
		case op == 0x43: // f32.const
			if _, err := c.r.bytes(4); err != nil {
				return err
			}
		case op == 0x44: // f64.const
			if _, err := c.r.bytes(8); err != nil {
				return err
			}
		case op == 0xD0: // ref.null: a reference type
			if _, err := c.r.byte(); err != nil {
				return err
			}
		case op == 0xFC:
			if err := c.miscOp(); err != nil {
				return err
			}
		case op == 0xFD:
			if err := c.simdOp(); err != nil {
				return err
			}
		default:
			return c.r.fail(fmt.Sprintf("unknown opcode %#x", op))
		}
	}
}

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
