package wasmrw

import (
	"errors"
	"fmt"
	"math"
	"strings"
)

// InterruptExport names the global AddInterrupt adds: a mutable i32 that
// starts at 0; setting it to anything else makes the guest trap
// (unreachable) at the next loop header it reaches.
const InterruptExport = "__wk_interrupt"

// ErrUnsupported: AddInterrupt met an instruction or encoding it does not
// decode. The module may still be valid; the caller runs it without the
// inserted checks (with the engine's own interruption instead).
var ErrUnsupported = errors.New("wasmrw: instruction not supported by the interrupt check")

// AddInterrupt returns a copy of wasm (normally Rewrite's output) that can be
// interrupted cheaply. It defines two more globals after every other one (so
// that no existing global index changes): a fuel counter, not exported, and
// a mutable i32 exported as InterruptExport; and it inserts at the start of
// every loop body
//
//	global.get $fuel
//	if                        ;; fuel left: one less
//	  global.get $fuel
//	  i32.const 1
//	  i32.sub
//	  global.set $fuel
//	else                      ;; every InterruptFuel iterations:
//	  i32.const 0
//	  memory.grow 0           ;; an exit to Go
//	  drop
//	  global.get $interrupt
//	  if
//	    unreachable
//	  end
//	  i32.const InterruptFuel
//	  global.set $fuel
//	end
//
// A loop that spins, and so every run of code that does not end by itself,
// passes a loop header, so a host that sets the interrupt global from another
// goroutine stops the guest within InterruptFuel iterations. The exit to Go
// is what lets the Go runtime stop the goroutine for a garbage collection:
// machine code wazero compiled cannot be preempted, so a guest spinning
// without ever leaving it would hold up every stop of the world, and with
// it the host goroutine that would set the interrupt (wazero's own checks
// leave native code at every back-edge for the same reason). memory.grow 0
// changes nothing, and wazero's compiler runs it in Go. The inserted if is a
// complete block before the loop's own instructions, so no branch depth
// changes. Code that does not loop (deep recursion) is ended by the stack
// limit instead.
//
// Only the global, export and code sections are re-encoded; DWARF custom
// sections (".debug_*") are dropped because their code offsets no longer
// hold after the insertion (wazero would print wrong source lines in stack
// traces); the "name" section and other custom sections are kept as they
// are (function indices do not change).
//
// It decodes every instruction of every function body and refuses, with
// ErrUnsupported, any opcode it does not know (wazero v1.12's instruction
// set, including SIMD, threads, tail calls, exceptions and typed function
// references, is known), and a module without memory; a broken encoding is
// ErrMalformed. It does not type-check: wazero does, when it compiles the
// output.
func AddInterrupt(wasm []byte) ([]byte, error) {
	p, err := parse(wasm)
	if err != nil {
		return nil, err
	}
	info := &p.info
	for _, e := range info.Exports {
		if e.Name == InterruptExport {
			return nil, fmt.Errorf("%w (the module exports %q)", ErrReservedExport, e.Name)
		}
	}
	if info.Memories == 0 {
		return nil, fmt.Errorf("%w: the check needs a memory (memory.grow)", ErrUnsupported)
	}
	fuel := uint64(info.ImportedGlobals) + uint64(len(info.Globals))
	idx := fuel + 1
	if idx >= math.MaxUint32 {
		return nil, fmt.Errorf("%w: too many globals", ErrInvalid)
	}
	newGlobals := appendSLEB([]byte{TypeI32, 0x01, 0x41}, InterruptFuel)   // mut i32 = InterruptFuel
	newGlobals = append(newGlobals, 0x0B, TypeI32, 0x01, 0x41, 0x00, 0x0B) // mut i32 = 0
	check := checkSequence(fuel, idx)
	export := appendULEB(nil, uint64(len(InterruptExport)))
	export = append(export, InterruptExport...)
	export = append(export, byte(KindGlobal))
	export = appendULEB(export, idx)

	out := make([]byte, 0, len(wasm)+len(wasm)/16+64)
	out = append(out, wasm[:8]...)
	globalDone := false
	for _, s := range p.sections {
		if s.id != secCustom && !globalDone && sectionRank[s.id] > sectionRank[secGlobal] {
			out = appendSection(out, secGlobal, appendULEB(nil, 2), newGlobals)
			globalDone = true
		}
		switch s.id {
		case secCustom:
			d := &decoder{buf: wasm, pos: s.start + 1, end: s.end}
			_, _ = d.u32()
			name, _ := d.nameBytes("custom section name") // parse checked both
			if strings.HasPrefix(string(name), ".debug_") {
				continue
			}
			out = append(out, wasm[s.start:s.end]...)
		case secGlobal:
			n, entries := vectorOf(wasm, s)
			out = appendSection(out, secGlobal, appendULEB(nil, uint64(n)+2), wasm[entries:s.end], newGlobals)
			globalDone = true
		case secExport:
			n, entries := vectorOf(wasm, s)
			if uint64(n)+1 > math.MaxUint32 {
				return nil, fmt.Errorf("%w: too many exports", ErrInvalid)
			}
			out = appendSection(out, secExport, appendULEB(nil, uint64(n)+1), wasm[entries:s.end], export)
		case secCode:
			body, err := instrumentCode(wasm, s, check)
			if err != nil {
				return nil, err
			}
			out = appendSection(out, secCode, body)
		default:
			out = append(out, wasm[s.start:s.end]...)
		}
	}
	if !globalDone {
		out = appendSection(out, secGlobal, appendULEB(nil, 2), newGlobals)
	}
	if !hasSection(p.sections, secExport) {
		out = insertExportSection(out, export)
	}
	return out, nil
}

// InterruptFuel is how many loop iterations a guest runs between two exits
// to Go (see AddInterrupt). An exit costs about as much as a hundred
// iterations of a tight loop, so it adds about 1 % there; a run of that
// many iterations takes some tens of microseconds, which bounds how long
// the guest holds up a stop of the Go world (a garbage collection).
const InterruptFuel = 10000

// checkSequence is the code inserted at every loop header, for the fuel
// global and the interrupt global idx.
func checkSequence(fuel, idx uint64) []byte {
	b := appendULEB([]byte{0x23}, fuel)   // global.get $fuel
	b = append(b, 0x04, 0x40)             // if
	b = appendULEB(append(b, 0x23), fuel) //   global.get $fuel
	b = append(b, 0x41, 0x01, 0x6B, 0x24) //   i32.const 1; i32.sub; global.set
	b = appendULEB(b, fuel)               //   $fuel
	b = append(b, 0x05)                   // else
	b = append(b, 0x41, 0x00, 0x40, 0x00) //   i32.const 0; memory.grow 0 (an exit to Go)
	b = append(b, 0x1A, 0x23)             //   drop; global.get
	b = appendULEB(b, idx)                //   $interrupt
	b = append(b, 0x04, 0x40, 0x00, 0x0B) //   if unreachable end
	b = appendSLEB(append(b, 0x41), InterruptFuel)
	b = appendULEB(append(b, 0x24), fuel) //   global.set $fuel
	return append(b, 0x0B)                // end
}

func hasSection(sections []span, id byte) bool {
	for _, s := range sections {
		if s.id == id {
			return true
		}
	}
	return false
}

// insertExportSection puts an export section holding one export into out,
// before the first section that ranks after it. Rewrite's output always has
// an export section; this is for other input.
func insertExportSection(out, export []byte) []byte {
	d := &decoder{buf: out, pos: 8, end: len(out)}
	for d.pos < len(out) {
		start := d.pos
		id, _ := d.readByte()
		size, _ := d.u32()
		if id != secCustom && sectionRank[id] > sectionRank[secExport] {
			sec := appendSection(nil, secExport, appendULEB(nil, 1), export)
			return append(out[:start:start], append(sec, out[start:]...)...)
		}
		d.pos += int(size)
	}
	return appendSection(out, secExport, appendULEB(nil, 1), export)
}

// appendSection appends a section made of parts.
func appendSection(out []byte, id byte, parts ...[]byte) []byte {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	out = append(out, id)
	out = appendULEB(out, uint64(n))
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// vectorOf returns the element count of a section that parse accepted and
// the offset its elements start at.
func vectorOf(wasm []byte, s span) (uint32, int) {
	d := &decoder{buf: wasm, pos: s.start + 1, end: s.end}
	_, _ = d.u32() // section size
	n, _ := d.u32()
	return n, d.pos
}

// instrumentCode returns the contents of a code section with check inserted
// after every loop's block type.
func instrumentCode(wasm []byte, s span, check []byte) ([]byte, error) {
	d := &decoder{buf: wasm, pos: s.start + 1, end: s.end, section: "code"}
	_, _ = d.u32() // section size
	n, _ := d.u32()
	out := appendULEB(make([]byte, 0, s.end-s.start+s.end/32), uint64(n))
	var body []byte
	for i := uint32(0); i < n; i++ {
		size, _ := d.u32() // parse checked sizes and locals
		end, sectionEnd := d.pos+int(size), d.end
		d.end = end
		start := d.pos
		locals, _ := d.u32()
		for range locals {
			_, _ = d.u32()
			_, _ = d.valType()
		}
		body = append(body[:0], wasm[start:d.pos]...) // the local declarations
		var err error
		if body, err = d.instrumentExpr(body, check); err != nil {
			return nil, fmt.Errorf("function body %d: %w", i, err)
		}
		d.end = sectionEnd
		if uint64(len(body)) > math.MaxUint32 {
			return nil, fmt.Errorf("%w: function body %d grows too large", ErrLimit, i)
		}
		out = appendULEB(out, uint64(len(body)))
		out = append(out, body...)
	}
	if uint64(len(out)) > math.MaxUint32 {
		return nil, fmt.Errorf("%w: code section grows too large", ErrLimit)
	}
	return out, nil
}

// instrumentExpr copies the instructions from d.pos to d.end after out,
// with check after every loop's block type.
func (d *decoder) instrumentExpr(out, check []byte) ([]byte, error) {
	copied := d.pos
	for d.pos < d.end {
		op, _ := d.readByte()
		var err error
		switch {
		case op == 0x03: // loop
			if err = d.blockType(); err != nil {
				return nil, err
			}
			out = append(out, d.buf[copied:d.pos]...)
			out = append(out, check...)
			copied = d.pos
		case op == 0x02 || op == 0x04: // block, if
			err = d.blockType()
		case op == 0x1F: // try_table
			err = d.tryTable()
		case op <= 0x01, op == 0x05, op == 0x0A, op == 0x0B, op == 0x0F, // unreachable nop else throw_ref end return
			op == 0x19, op == 0x1A, op == 0x1B, // catch_all drop select
			op == 0xD1, op == 0xD3, op == 0xD4, // ref.is_null ref.eq ref.as_non_null
			op >= 0x45 && op <= 0xC4: // numeric, sign extension
		case op == 0x06: // try (legacy exceptions)
			err = d.blockType()
		case op >= 0x07 && op <= 0x09, op == 0x0C, op == 0x0D, // catch throw rethrow br br_if
			op == 0x10, op == 0x12, op == 0x14, op == 0x15, op == 0x18, // call return_call call_ref return_call_ref delegate
			op >= 0x20 && op <= 0x26, // local.*, global.*, table.get/set
			op == 0x3F, op == 0x40,   // memory.size, memory.grow
			op == 0xD2, op == 0xD5, op == 0xD6: // ref.func br_on_null br_on_non_null
			_, err = d.u32()
		case op == 0x0E: // br_table
			err = d.brTable()
		case op == 0x11, op == 0x13: // call_indirect, return_call_indirect
			if _, err = d.u32(); err == nil {
				_, err = d.u32()
			}
		case op == 0x1C: // select t*
			err = d.typedSelect()
		case op >= 0x28 && op <= 0x3E: // loads and stores
			err = d.memArg()
		case op == 0x41:
			err = d.s32()
		case op == 0x42:
			err = d.s64()
		case op == 0x43:
			err = d.skip(4)
		case op == 0x44:
			err = d.skip(8)
		case op == 0xD0: // ref.null heaptype
			err = d.s33()
		case op == 0xFC:
			err = d.miscOp()
		case op == 0xFD:
			err = d.vectorOp()
		case op == 0xFE:
			err = d.atomicOp()
		default:
			d.pos--
			return nil, fmt.Errorf("%w: opcode 0x%02x (at byte %d)", ErrUnsupported, op, d.pos)
		}
		if err != nil {
			return nil, err
		}
	}
	return append(out, d.buf[copied:d.pos]...), nil
}

// s33 skips a signed LEB128 integer of at most 33 bits (a block type's type
// index, a heap type): in its 5th byte bits 0..4 are payload and bits 5..6
// repeat the sign (bit 4).
func (d *decoder) s33() error { return d.signed5(0x10, 0x60) }

// blockType skips a block type: 0x40, a value type or a type index.
func (d *decoder) blockType() error {
	if d.pos < d.end && (d.buf[d.pos] == 0x63 || d.buf[d.pos] == 0x64) {
		return fmt.Errorf("%w: typed reference block type (at byte %d)", ErrUnsupported, d.pos)
	}
	return d.s33()
}

func (d *decoder) brTable() error {
	n, err := d.count("branch targets", 1)
	if err != nil {
		return err
	}
	for range n + 1 { // the targets and the default
		if _, err := d.u32(); err != nil {
			return err
		}
	}
	return nil
}

func (d *decoder) typedSelect() error { return d.valTypes("select types") }

// tryTable skips try_table's block type and catch clauses.
func (d *decoder) tryTable() error {
	if err := d.blockType(); err != nil {
		return err
	}
	n, err := d.count("catch clauses", 2)
	if err != nil {
		return err
	}
	for range n {
		kind, err := d.readByte()
		if err != nil {
			return err
		}
		switch kind {
		case 0x00, 0x01: // catch, catch_ref: tag and label
			if _, err := d.u32(); err != nil {
				return err
			}
		case 0x02, 0x03: // catch_all, catch_all_ref: label
		default:
			d.pos--
			return d.fail("catch clause kind 0x%02x is unknown", kind)
		}
		if _, err := d.u32(); err != nil {
			return err
		}
	}
	return nil
}

// memArg skips a memory argument: alignment (bit 6 says a memory index
// follows), memory index, offset.
func (d *decoder) memArg() error {
	align, err := d.u32()
	if err != nil {
		return err
	}
	if align&0x40 != 0 {
		if _, err := d.u32(); err != nil {
			return err
		}
	}
	_, err = d.u32()
	return err
}

// miscOp skips an 0xFC instruction (saturating truncation, bulk memory,
// tables).
func (d *decoder) miscOp() error {
	sub, err := d.u32()
	if err != nil {
		return err
	}
	operands := 0
	switch {
	case sub <= 7: // trunc_sat
	case sub == 9, sub == 11, sub == 13, sub == 15, sub == 16, sub == 17: // data.drop memory.fill elem.drop table.grow/size/fill
		operands = 1
	case sub == 8, sub == 10, sub == 12, sub == 14: // memory.init memory.copy table.init table.copy
		operands = 2
	default:
		return fmt.Errorf("%w: opcode 0xfc %d (at byte %d)", ErrUnsupported, sub, d.pos)
	}
	for range operands {
		if _, err := d.u32(); err != nil {
			return err
		}
	}
	return nil
}

// vectorOp skips an 0xFD (SIMD) instruction.
func (d *decoder) vectorOp() error {
	sub, err := d.u32()
	if err != nil {
		return err
	}
	switch {
	case sub <= 11, sub == 92, sub == 93: // loads, store, load32/64_zero
		return d.memArg()
	case sub == 12, sub == 13: // v128.const, i8x16.shuffle
		return d.skip(16)
	case sub >= 21 && sub <= 34: // extract_lane, replace_lane
		return d.skip(1)
	case sub >= 84 && sub <= 91: // load_lane, store_lane
		if err := d.memArg(); err != nil {
			return err
		}
		return d.skip(1)
	case sub <= 255:
		return nil
	}
	return fmt.Errorf("%w: opcode 0xfd %d (at byte %d)", ErrUnsupported, sub, d.pos)
}

// atomicOp skips an 0xFE (threads) instruction.
func (d *decoder) atomicOp() error {
	sub, err := d.u32()
	if err != nil {
		return err
	}
	switch {
	case sub == 0x03: // atomic.fence
		return d.skip(1)
	case sub <= 0x02, sub >= 0x10 && sub <= 0x4E:
		return d.memArg()
	}
	return fmt.Errorf("%w: opcode 0xfe %d (at byte %d)", ErrUnsupported, sub, d.pos)
}
