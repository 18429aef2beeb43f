package wasmrw

import (
	"fmt"
	"unicode/utf8"
)

// decoder reads a WebAssembly binary. pos is an absolute offset into buf;
// end is the limit of the section being decoded (len(buf) between sections).
type decoder struct {
	buf     []byte
	pos     int
	end     int
	section string // name of the section being decoded, for errors
}

// fail returns an ErrMalformed error located at the current offset.
func (d *decoder) fail(format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if d.section == "" {
		return fmt.Errorf("%w: %s (at byte %d)", ErrMalformed, msg, d.pos)
	}
	return fmt.Errorf("%w: %s section: %s (at byte %d)", ErrMalformed, d.section, msg, d.pos)
}

// invalid returns an ErrInvalid error located at the current offset.
func (d *decoder) invalid(format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	return fmt.Errorf("%w: %s section: %s (at byte %d)", ErrInvalid, d.section, msg, d.pos)
}

func (d *decoder) remaining() int { return d.end - d.pos }

func (d *decoder) truncated() error {
	if d.section == "" {
		return d.fail("unexpected end of module")
	}
	return d.fail("unexpected end of section")
}

func (d *decoder) readByte() (byte, error) {
	if d.pos >= d.end {
		return 0, d.truncated()
	}
	b := d.buf[d.pos]
	d.pos++
	return b, nil
}

func (d *decoder) skip(n int) error {
	if n < 0 || n > d.remaining() {
		return d.truncated()
	}
	d.pos += n
	return nil
}

func (d *decoder) lebTooLong() error {
	return d.fail("LEB128 integer too long or out of range")
}

// u32 reads an unsigned LEB128 integer of at most 32 bits.
func (d *decoder) u32() (uint32, error) {
	var v uint32
	for i := 0; i < 5; i++ {
		b, err := d.readByte()
		if err != nil {
			return 0, err
		}
		if i == 4 && b&0xF0 != 0 { // continuation bit or bits beyond 32
			return 0, d.lebTooLong()
		}
		v |= uint32(b&0x7F) << (7 * i)
		if b&0x80 == 0 {
			return v, nil
		}
	}
	return 0, d.lebTooLong() // unreachable: the 5th byte was checked above
}

// s32 skips a signed LEB128 integer of at most 32 bits: in its 5th byte
// bits 0..3 are payload and bits 4..6 repeat the sign (bit 3).
func (d *decoder) s32() error { return d.signed5(0x08, 0x70) }

// signed5 skips a signed LEB128 integer of at most five bytes whose last
// byte has the sign bit sign and the bits ext that must repeat it.
func (d *decoder) signed5(sign, ext byte) error {
	for i := 0; i < 5; i++ {
		b, err := d.readByte()
		if err != nil {
			return err
		}
		if i == 4 {
			if b&0x80 != 0 || (b&sign == 0 && b&ext != 0) || (b&sign != 0 && b&ext != ext) {
				return d.lebTooLong()
			}
			return nil
		}
		if b&0x80 == 0 {
			return nil
		}
	}
	return nil
}

// s64 skips a signed LEB128 integer of at most 64 bits.
func (d *decoder) s64() error {
	for i := 0; i < 10; i++ {
		b, err := d.readByte()
		if err != nil {
			return err
		}
		if i == 9 {
			// Bit 0 is bit 63; bits 1..6 must repeat it.
			if b != 0x00 && b != 0x7F {
				return d.lebTooLong()
			}
			return nil
		}
		if b&0x80 == 0 {
			return nil
		}
	}
	return nil
}

// count reads a vector length and checks that count elements of at least
// minSize bytes each fit in the rest of the section, so that callers may
// allocate count elements.
func (d *decoder) count(what string, minSize int) (int, error) {
	n, err := d.u32()
	if err != nil {
		return 0, err
	}
	if uint64(n)*uint64(minSize) > uint64(d.remaining()) {
		return 0, d.fail("%d %s do not fit in the %d bytes left", n, what, d.remaining())
	}
	return int(n), nil
}

// name reads a length-prefixed UTF-8 string.
func (d *decoder) name(what string) (string, error) {
	b, err := d.nameBytes(what)
	return string(b), err
}

// nameBytes reads a length-prefixed UTF-8 string without copying it.
func (d *decoder) nameBytes(what string) ([]byte, error) {
	n, err := d.u32()
	if err != nil {
		return nil, err
	}
	if uint64(n) > uint64(d.remaining()) {
		return nil, d.fail("%s length %d exceeds the %d bytes left", what, n, d.remaining())
	}
	b := d.buf[d.pos : d.pos+int(n)]
	if !utf8.Valid(b) {
		return nil, d.fail("%s is not valid UTF-8", what)
	}
	d.pos += int(n)
	return b, nil
}

// valType reads a value type.
func (d *decoder) valType() (byte, error) {
	b, err := d.readByte()
	if err != nil {
		return 0, err
	}
	switch b {
	case TypeI32, TypeI64, TypeF32, TypeF64, TypeV128, TypeFuncref, TypeExternref:
		return b, nil
	}
	d.pos--
	return 0, d.fail("value type 0x%02x is not supported", b)
}

// refType reads a reference type.
func (d *decoder) refType() (byte, error) {
	b, err := d.readByte()
	if err != nil {
		return 0, err
	}
	switch b {
	case TypeFuncref, TypeExternref:
		return b, nil
	}
	d.pos--
	return 0, d.fail("reference type 0x%02x is not supported", b)
}

// globalType reads a value type and a mutability flag.
func (d *decoder) globalType() (Global, error) {
	t, err := d.valType()
	if err != nil {
		return Global{}, err
	}
	m, err := d.readByte()
	if err != nil {
		return Global{}, err
	}
	if m > 1 {
		d.pos--
		return Global{}, d.fail("mutability flag 0x%02x is neither 0x00 nor 0x01", m)
	}
	return Global{Type: t, Mutable: m == 1}, nil
}

// maxPages is the number of 64 KiB pages in a 32-bit memory (4 GiB).
const maxPages = 65536

// memLimits reads a memory type.
func (d *decoder) memLimits() (MemoryInfo, error) {
	flag, err := d.readByte()
	if err != nil {
		return MemoryInfo{}, err
	}
	var m MemoryInfo
	switch flag {
	case 0x00, 0x01, 0x02, 0x03:
	case 0x04, 0x05, 0x06, 0x07:
		return MemoryInfo{}, fmt.Errorf("%w (%s section, at byte %d)", ErrMemory64, d.section, d.pos-1)
	default:
		d.pos--
		return MemoryInfo{}, d.fail("memory limits flag 0x%02x is not supported", flag)
	}
	m.Shared = flag&0x02 != 0
	m.HasMax = flag&0x01 != 0
	if m.Min, err = d.u32(); err != nil {
		return MemoryInfo{}, err
	}
	if m.HasMax {
		if m.Max, err = d.u32(); err != nil {
			return MemoryInfo{}, err
		}
	}
	if m.Min > maxPages || (m.HasMax && m.Max > maxPages) {
		return MemoryInfo{}, d.invalid("memory size must be at most %d pages (4 GiB)", maxPages)
	}
	if m.HasMax && m.Max < m.Min {
		return MemoryInfo{}, d.invalid("memory maximum %d is below its minimum %d", m.Max, m.Min)
	}
	return m, nil
}

// tableType reads a reference type and table limits.
func (d *decoder) tableType() error {
	b, err := d.readByte()
	if err != nil {
		return err
	}
	if b == 0x40 {
		d.pos--
		return d.fail("tables with an initializer expression are not supported")
	}
	d.pos--
	if _, err := d.refType(); err != nil {
		return err
	}
	flag, err := d.readByte()
	if err != nil {
		return err
	}
	if flag > 1 {
		d.pos--
		return d.fail("table limits flag 0x%02x is not supported", flag)
	}
	min, err := d.u32()
	if err != nil {
		return err
	}
	if flag == 1 {
		max, err := d.u32()
		if err != nil {
			return err
		}
		if max < min {
			return d.invalid("table maximum %d is below its minimum %d", max, min)
		}
	}
	return nil
}

// tagType reads an exception tag type: attribute 0x00 and a type index.
func (d *decoder) tagType() (uint32, error) {
	attr, err := d.readByte()
	if err != nil {
		return 0, err
	}
	if attr != 0 {
		d.pos--
		return 0, d.fail("tag attribute 0x%02x is not 0x00", attr)
	}
	return d.u32()
}

// constExpr skips a constant expression up to and including its end opcode.
// It checks the encoding, not the typing.
func (d *decoder) constExpr() error {
	for {
		op, err := d.readByte()
		if err != nil {
			return err
		}
		switch op {
		case 0x0B: // end
			return nil
		case 0x41: // i32.const
			err = d.s32()
		case 0x42: // i64.const
			err = d.s64()
		case 0x43: // f32.const
			err = d.skip(4)
		case 0x44: // f64.const
			err = d.skip(8)
		case 0x23, 0xD2: // global.get, ref.func
			_, err = d.u32()
		case 0xD0: // ref.null
			_, err = d.refType()
		case 0x6A, 0x6B, 0x6C, 0x7C, 0x7D, 0x7E: // extended-const i32/i64 add, sub, mul
		case 0xFD:
			var sub uint32
			if sub, err = d.u32(); err != nil {
				return err
			}
			if sub != 12 { // v128.const
				return d.fail("vector opcode 0xfd %d is not allowed in a constant expression", sub)
			}
			err = d.skip(16)
		default:
			d.pos--
			return d.fail("opcode 0x%02x is not allowed in a constant expression", op)
		}
		if err != nil {
			return err
		}
	}
}

// funcType reads a function type: 0x60, parameter and result types.
func (d *decoder) funcType() error {
	form, err := d.readByte()
	if err != nil {
		return err
	}
	if form != 0x60 {
		d.pos--
		return d.fail("type form 0x%02x is not supported (only function types are)", form)
	}
	for _, what := range [2]string{"parameters", "results"} {
		if err := d.valTypes(what); err != nil {
			return err
		}
	}
	return nil
}

// valTypes skips a vector of value types (what names it in errors).
func (d *decoder) valTypes(what string) error {
	n, err := d.count(what, 1)
	if err != nil {
		return err
	}
	for range n {
		if _, err := d.valType(); err != nil {
			return err
		}
	}
	return nil
}

// elementSegment reads an element segment.
func (d *decoder) elementSegment() error {
	flag, err := d.u32()
	if err != nil {
		return err
	}
	if flag > 7 {
		return d.fail("element segment flags %d are unknown", flag)
	}
	if flag&0x03 == 0x02 { // explicit table index
		if _, err := d.u32(); err != nil {
			return err
		}
	}
	if flag&0x01 == 0 { // active: offset expression
		if err := d.constExpr(); err != nil {
			return err
		}
	}
	if flag&0x04 == 0 { // function indices
		if flag&0x03 != 0 { // elemkind
			k, err := d.readByte()
			if err != nil {
				return err
			}
			if k != 0 {
				d.pos--
				return d.fail("element kind 0x%02x is not 0x00", k)
			}
		}
		n, err := d.count("function indices", 1)
		if err != nil {
			return err
		}
		for range n {
			if _, err := d.u32(); err != nil {
				return err
			}
		}
		return nil
	}
	if flag&0x03 != 0 { // reference type
		if _, err := d.refType(); err != nil {
			return err
		}
	}
	n, err := d.count("element expressions", 1)
	if err != nil {
		return err
	}
	for range n {
		if err := d.constExpr(); err != nil {
			return err
		}
	}
	return nil
}

// dataSegment reads a data segment.
func (d *decoder) dataSegment() error {
	flag, err := d.u32()
	if err != nil {
		return err
	}
	switch flag {
	case 0, 2:
		if flag == 2 {
			if _, err := d.u32(); err != nil { // memory index
				return err
			}
		}
		if err := d.constExpr(); err != nil {
			return err
		}
	case 1:
	default:
		return d.fail("data segment flags %d are unknown", flag)
	}
	n, err := d.u32()
	if err != nil {
		return err
	}
	if uint64(n) > uint64(d.remaining()) {
		return d.fail("data segment of %d bytes exceeds the %d bytes left", n, d.remaining())
	}
	d.pos += int(n)
	return nil
}

// MaxLocals is the most locals a function may declare (besides its
// parameters); the limit of the web engines' JavaScript API.
const MaxLocals = 50000

// functionBody reads the size and local declarations of a function body and
// skips its instructions.
func (d *decoder) functionBody(i int) error {
	size, err := d.u32()
	if err != nil {
		return err
	}
	if uint64(size) > uint64(d.remaining()) {
		return d.fail("function body %d of %d bytes exceeds the %d bytes left", i, size, d.remaining())
	}
	end, sectionEnd := d.pos+int(size), d.end
	d.end = end
	n, err := d.count("local declarations", 2)
	if err != nil {
		return err
	}
	var locals uint64
	for range n {
		k, err := d.u32()
		if err != nil {
			return err
		}
		if _, err := d.valType(); err != nil {
			return err
		}
		if locals += uint64(k); locals > MaxLocals {
			return fmt.Errorf("%w: function body %d declares more than %d locals (at byte %d)", ErrLimit, i, MaxLocals, d.pos)
		}
	}
	d.pos, d.end = end, sectionEnd
	return nil
}

// nameSection reads the subsections of the "name" custom section that
// wazero decodes (module, function and local names), so that their counts
// are known to fit in the input.
func (d *decoder) nameSection() error {
	nameMap := func() error {
		n, err := d.count("names", 2)
		if err != nil {
			return err
		}
		for range n {
			if _, err := d.u32(); err != nil {
				return err
			}
			if _, err := d.nameBytes("name"); err != nil {
				return err
			}
		}
		return nil
	}
	sectionEnd := d.end
	for d.pos < sectionEnd {
		id, err := d.readByte()
		if err != nil {
			return err
		}
		size, err := d.u32()
		if err != nil {
			return err
		}
		if uint64(size) > uint64(d.remaining()) {
			return d.fail("subsection %d of %d bytes exceeds the %d bytes left", id, size, d.remaining())
		}
		end := d.pos + int(size)
		d.end = end
		switch id {
		case 0:
			_, err = d.nameBytes("module name")
		case 1:
			err = nameMap()
		case 2:
			var n int
			if n, err = d.count("functions", 2); err != nil {
				return err
			}
			for range n {
				if _, err := d.u32(); err != nil {
					return err
				}
				if err := nameMap(); err != nil {
					return err
				}
			}
		}
		if err != nil {
			return err
		}
		d.pos, d.end = end, sectionEnd
	}
	return nil
}
