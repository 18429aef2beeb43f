package wasmrw

// A tiny test-only assembler for WebAssembly binary sections.

func cat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

func bs(b ...byte) []byte { return b }

func uleb(v uint64) []byte { return appendULEB(nil, v) }

func sleb(v int64) []byte {
	var b []byte
	for {
		c := byte(v & 0x7F)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

func str(s string) []byte { return cat(uleb(uint64(len(s))), []byte(s)) }

func vec(items ...[]byte) []byte { return cat(uleb(uint64(len(items))), cat(items...)) }

func section(id byte, body ...[]byte) []byte {
	b := cat(body...)
	return cat(bs(id), uleb(uint64(len(b))), b)
}

var header = bs(0x00, 'a', 's', 'm', 0x01, 0x00, 0x00, 0x00)

func module(sections ...[]byte) []byte { return cat(header, cat(sections...)) }

func customSec(name string, data ...byte) []byte { return section(secCustom, str(name), data) }

// Types: 0 = () -> (), 1 = () -> i32, 2 = (i32) -> i32.
func typeSec() []byte {
	return section(secType, vec(
		bs(0x60, 0, 0),
		bs(0x60, 0, 1, 0x7F),
		bs(0x60, 1, 0x7F, 1, 0x7F),
	))
}

func importSec(imports ...[]byte) []byte { return section(secImport, vec(imports...)) }

func imp(mod, name string, desc ...byte) []byte { return cat(str(mod), str(name), desc) }

func funcSec(types ...uint32) []byte {
	items := make([][]byte, len(types))
	for i, t := range types {
		items[i] = uleb(uint64(t))
	}
	return section(secFunction, vec(items...))
}

func memSec(limits ...[]byte) []byte { return section(secMemory, vec(limits...)) }

func mem(min uint32) []byte { return cat(bs(0), uleb(uint64(min))) }

func memMax(min, max uint32) []byte { return cat(bs(1), uleb(uint64(min)), uleb(uint64(max))) }

func globalSec(globals ...[]byte) []byte { return section(secGlobal, vec(globals...)) }

func glob(t byte, mut bool, init ...byte) []byte {
	m := byte(0)
	if mut {
		m = 1
	}
	return cat(bs(t, m), init, bs(0x0B))
}

func i32c(v int32) []byte { return cat(bs(0x41), sleb(int64(v))) }

func i64c(v int64) []byte { return cat(bs(0x42), sleb(v)) }

func exportSec(exports ...[]byte) []byte { return section(secExport, vec(exports...)) }

func exp(name string, kind Kind, idx uint32) []byte {
	return cat(str(name), bs(byte(kind)), uleb(uint64(idx)))
}

func startSec(f uint32) []byte { return section(secStart, uleb(uint64(f))) }

func codeSec(bodies ...[]byte) []byte { return section(secCode, vec(bodies...)) }

// withSize prefixes b with its length.
func withSize(b []byte) []byte { return cat(uleb(uint64(len(b))), b) }

// fn encodes a function body without locals.
func fn(instrs ...byte) []byte {
	b := cat(bs(0), instrs, bs(0x0B))
	return cat(uleb(uint64(len(b))), b)
}
