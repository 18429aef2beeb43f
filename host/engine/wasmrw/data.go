package wasmrw

// DataSegment is an active data segment that Rewrite lifted out of a
// module: at instantiation, Init is written to memory 0 at Offset.
type DataSegment struct {
	Offset uint32
	Init   []byte
}

// dataSegment is one decoded segment of a data section.
type dataSegment struct {
	passive bool
	flag    uint32 // 0, 1 or 2, as encoded
	offset  uint32 // active: the offset, if constant
	raw     []byte // the whole encoded segment
	init    []byte // the bytes, aliasing the input
}

// liftData decodes the data section in s and decides whether its active
// segments can be lifted out: each must write memory 0 at an i32.const
// offset, inside the memory's initial size (minPages), so that writing the
// segments before anything runs is exactly what instantiation does. If so,
// it returns the segments, copied, and the section that replaces s: without
// any active segment's bytes, or nil (the section is left out) when the
// module has no data count section, since memory.init and data.drop, the
// only instructions that name a data segment, require one. With a data
// count section, the replacement keeps every segment, and its index, with
// active segments emptied: instantiation drops active segments, so no
// instruction can tell an emptied one from the original. ok is false when
// nothing is lifted.
func liftData(wasm []byte, s span, hasDataCount bool, minPages uint32) (segs []DataSegment, section []byte, ok bool) {
	d := &decoder{buf: wasm, pos: s.start + 1, end: s.end}
	if _, err := d.u32(); err != nil { // section size, checked by parse
		return nil, nil, false
	}
	n, err := d.u32()
	if err != nil {
		return nil, nil, false
	}
	limit := uint64(minPages) << 16
	decoded := make([]dataSegment, 0, min(int(n), d.remaining()/2))
	total, active := 0, 0
	for range n {
		start := d.pos
		var seg dataSegment
		if seg.flag, err = d.u32(); err != nil {
			return nil, nil, false
		}
		switch seg.flag {
		case 0, 2:
			if seg.flag == 2 {
				if m, err := d.u32(); err != nil || m != 0 {
					return nil, nil, false
				}
			}
			exprStart := d.pos
			if err := d.constExpr(); err != nil {
				return nil, nil, false
			}
			off, ok := i32Const(wasm[exprStart:d.pos])
			if !ok || off < 0 {
				return nil, nil, false
			}
			seg.offset = uint32(off)
			active++
		case 1:
			seg.passive = true
		default:
			return nil, nil, false
		}
		size, err := d.u32()
		if err != nil || uint64(size) > uint64(d.remaining()) {
			return nil, nil, false
		}
		seg.init = wasm[d.pos : d.pos+int(size)]
		d.pos += int(size)
		seg.raw = wasm[start:d.pos]
		if !seg.passive {
			if uint64(seg.offset)+uint64(size) > limit {
				return nil, nil, false // instantiation fails; leave it to wazero
			}
			total += int(size)
		}
		decoded = append(decoded, seg)
	}
	if active == 0 {
		return nil, nil, false
	}

	// One copy of every lifted byte, in one allocation.
	buf := make([]byte, 0, total)
	segs = make([]DataSegment, 0, active)
	for _, seg := range decoded {
		if !seg.passive {
			buf = append(buf, seg.init...)
			segs = append(segs, DataSegment{Offset: seg.offset, Init: buf[len(buf)-len(seg.init) : len(buf) : len(buf)]})
		}
	}
	if !hasDataCount && active == len(decoded) {
		return segs, nil, true
	}
	body := appendULEB(nil, uint64(len(decoded)))
	for _, seg := range decoded {
		if seg.passive {
			body = append(body, seg.raw...)
			continue
		}
		body = appendULEB(body, uint64(seg.flag))
		if seg.flag == 2 {
			body = append(body, 0) // memory 0
		}
		body = append(body, 0x41)
		body = appendSLEB(body, int64(seg.offset))
		body = append(body, 0x0B, 0) // end, no bytes
	}
	section = append([]byte{secData}, appendULEB(nil, uint64(len(body)))...)
	return segs, append(section, body...), true
}

// i32Const decodes a constant expression that is a single i32.const.
func i32Const(expr []byte) (int32, bool) {
	if len(expr) < 3 || expr[0] != 0x41 || expr[len(expr)-1] != 0x0B {
		return 0, false
	}
	var v int64
	var shift uint
	for i, b := range expr[1 : len(expr)-1] {
		v |= int64(b&0x7F) << shift
		shift += 7
		if b&0x80 == 0 {
			if i != len(expr)-3 {
				return 0, false // more than one instruction
			}
			if shift < 64 && b&0x40 != 0 {
				v |= -1 << shift
			}
			return int32(v), true
		}
	}
	return 0, false
}

// appendSLEB appends v as a signed LEB128 integer.
func appendSLEB(b []byte, v int64) []byte {
	for {
		c := byte(v & 0x7F)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}
