package wasmrw

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Names the rewrite adds to a module's exports. Every name starting with
// ReservedPrefix belongs to the host; a module that exports one is refused.
const (
	// ReservedPrefix starts every name the host adds.
	ReservedPrefix = "__wk_"
	// GlobalExportPrefix followed by the decimal defined-global index names
	// each defined global; see GlobalExportName.
	GlobalExportPrefix = "__wk_g"
	// MemoryExport names memory 0.
	MemoryExport = "__wk_mem"
	// StartExport names the former start function, if the module had one.
	StartExport = "__wk_start"
)

// GlobalExportName returns the name under which the rewrite exports defined
// global i (0-based, imported globals not counted).
func GlobalExportName(i int) string { return GlobalExportPrefix + strconv.Itoa(i) }

// Value types of globals, as encoded in the binary format.
const (
	TypeI32       byte = 0x7F // i32
	TypeI64       byte = 0x7E // i64
	TypeF32       byte = 0x7D // f32
	TypeF64       byte = 0x7C // f64
	TypeV128      byte = 0x7B // v128
	TypeFuncref   byte = 0x70 // funcref
	TypeExternref byte = 0x6F // externref
)

// Kind is the kind of an import or export, as encoded in the binary format.
type Kind byte

// Import and export kinds.
const (
	KindFunc   Kind = 0x00 // function
	KindTable  Kind = 0x01 // table
	KindMemory Kind = 0x02 // memory
	KindGlobal Kind = 0x03 // global
	KindTag    Kind = 0x04 // exception tag
)

// String returns the kind's name in the text format ("func", "memory", ...).
func (k Kind) String() string {
	switch k {
	case KindFunc:
		return "func"
	case KindTable:
		return "table"
	case KindMemory:
		return "memory"
	case KindGlobal:
		return "global"
	case KindTag:
		return "tag"
	}
	return fmt.Sprintf("kind(0x%02x)", byte(k))
}

// Errors returned by Parse and Rewrite. Returned errors wrap one of these
// (test with errors.Is) and add details such as a byte offset or a name;
// their text is meant to be shown to whoever uploaded the module.
var (
	// ErrNotWasm: the input does not start with the WebAssembly magic
	// number and binary format version 1.
	ErrNotWasm = errors.New("wasmrw: not a WebAssembly module")
	// ErrMalformed: the binary encoding is broken (truncated, bad LEB128,
	// wrong section order or size, unknown opcode, ...) or uses an encoding
	// this package does not support.
	ErrMalformed = errors.New("wasmrw: malformed WebAssembly module")
	// ErrInvalid: the module is well encoded but breaks a validation rule
	// that Parse checks (index out of range, duplicate export name, limits).
	ErrInvalid = errors.New("wasmrw: invalid WebAssembly module")
	// ErrImportedMemory: the module imports its memory.
	ErrImportedMemory = errors.New("wasmrw: imported memory is not supported")
	// ErrMultipleMemories: the module has more than one memory.
	ErrMultipleMemories = errors.New("wasmrw: more than one memory is not supported")
	// ErrNoMemory: the module has no memory.
	ErrNoMemory = errors.New("wasmrw: module has no memory; one exported or defined linear memory is required")
	// ErrSharedMemory: the module's memory is shared (threads).
	ErrSharedMemory = errors.New("wasmrw: shared memory is not supported")
	// ErrMemory64: the module has a 64-bit memory.
	ErrMemory64 = errors.New("wasmrw: 64-bit memory (memory64) is not supported")
	// ErrV128Global: the module defines a v128 global, which wazero can
	// read and set only in part.
	ErrV128Global = errors.New("wasmrw: v128 globals cannot be snapshotted")
	// ErrRefGlobal: the module defines a mutable funcref or externref
	// global. Its value is a pointer into one instance and means nothing in
	// another.
	ErrRefGlobal = errors.New("wasmrw: mutable funcref/externref globals cannot be snapshotted")
	// ErrLimit: the module exceeds a limit of this package (MaxLocals).
	ErrLimit = errors.New("wasmrw: module exceeds an implementation limit")
	// ErrReservedExport: the module already exports a name starting with
	// ReservedPrefix.
	ErrReservedExport = errors.New(`wasmrw: export names starting with "__wk_" are reserved for the host`)
)

// Info describes a module. Rewrite returns it for the rewritten module,
// Parse for the module as given.
type Info struct {
	// Globals lists every defined global in index order; imported globals
	// are excluded. Defined global i has global index ImportedGlobals+i.
	Globals []Global
	// ImportedGlobals is the number of imported globals.
	ImportedGlobals int
	// HadStart reports whether the module has (Parse) or had (Rewrite) a
	// start section.
	HadStart bool
	// StartFunc is the start function's index, if HadStart.
	StartFunc uint32
	// Memory describes memory 0 (the zero value if Memories is 0).
	Memory MemoryInfo
	// Memories is the number of memories, imported and defined.
	Memories int
	// Imports lists the imports in order.
	Imports []Import
	// Exports lists the exports in order; for Rewrite, those of the
	// rewritten module (the original ones first, then the added ones).
	Exports []Export
	// Data lists, for Rewrite, the active data segments lifted out of the
	// module, in order: whoever instantiates the rewritten module must
	// write each at its offset in memory 0 (later ones over earlier ones)
	// before anything runs. Nil when nothing was lifted, and for Parse.
	Data []DataSegment
}

// Global describes a defined global.
type Global struct {
	// Type is the value type: TypeI32, TypeI64, TypeF32, TypeF64, TypeV128,
	// TypeFuncref or TypeExternref.
	Type byte
	// Mutable reports whether the global is mutable. Only mutable globals
	// need restoring; immutable ones are re-initialized identically.
	Mutable bool
	// ExportName is a name the global is exported under: for Rewrite, or
	// for Parse of a rewritten module, GlobalExportName(i); otherwise its
	// first export name, or "" if it is not exported.
	ExportName string
}

// MemoryInfo describes memory 0.
type MemoryInfo struct {
	// Min is the initial size in 64 KiB pages.
	Min uint32
	// Max is the maximum size in pages, if HasMax.
	Max uint32
	// HasMax reports whether the memory declares a maximum.
	HasMax bool
	// Imported reports whether the memory is imported (Rewrite refuses it).
	Imported bool
	// Shared reports whether the memory is shared (Rewrite refuses it).
	Shared bool
	// ExportName is a name the memory is exported under: for Rewrite, or
	// for Parse of a rewritten module, MemoryExport; otherwise its first
	// export name, or "".
	ExportName string
}

// Import describes one import.
type Import struct {
	// Module and Name are the two-level import name.
	Module, Name string
	// Kind is what is imported.
	Kind Kind
	// Index is the import's index in the index space of its kind.
	Index uint32
	// TypeIndex is the type index of an imported function or tag.
	TypeIndex uint32
	// Global is the type of an imported global (ExportName is empty).
	Global Global
}

// Export describes one export.
type Export struct {
	// Name is the export name.
	Name string
	// Kind is what is exported.
	Kind Kind
	// Index is the exported item's index in the index space of its kind.
	Index uint32
}

// Section ids.
const (
	secCustom    = 0
	secType      = 1
	secImport    = 2
	secFunction  = 3
	secTable     = 4
	secMemory    = 5
	secGlobal    = 6
	secExport    = 7
	secStart     = 8
	secElement   = 9
	secCode      = 10
	secData      = 11
	secDataCount = 12
	secTag       = 13
)

var sectionNames = [...]string{"custom", "type", "import", "function", "table", "memory",
	"global", "export", "start", "element", "code", "data", "data count", "tag"}

// sectionRank gives the position a non-custom section must appear at; 0
// means unknown.
var sectionRank = [...]int{
	secType: 1, secImport: 2, secFunction: 3, secTable: 4, secMemory: 5, secTag: 6,
	secGlobal: 7, secExport: 8, secStart: 9, secElement: 10, secDataCount: 11, secCode: 12, secData: 13,
}

// span is a whole section (id, size and contents) in the input.
type span struct {
	id         byte
	start, end int
}

type parsed struct {
	info      Info
	sections  []span
	memImport int // index in info.Imports of an imported memory, or -1
}

var magic = []byte{0x00, 'a', 's', 'm'}

// Parse decodes a WebAssembly 1.0/2.0 binary module and describes it,
// without rewriting it. It refuses what Rewrite refuses as malformed or
// invalid (ErrNotWasm, ErrMalformed, ErrInvalid, ErrMemory64, ErrLimit) but
// not what Rewrite refuses as impossible to snapshot, nor reserved export
// names: Parse of a rewritten module succeeds.
func Parse(wasm []byte) (*Info, error) {
	p, err := parse(wasm)
	if err != nil {
		return nil, err
	}
	return &p.info, nil
}

func parse(wasm []byte) (*parsed, error) {
	if len(wasm) < 8 || string(wasm[:4]) != string(magic) {
		return nil, ErrNotWasm
	}
	if v := uint32(wasm[4]) | uint32(wasm[5])<<8 | uint32(wasm[6])<<16 | uint32(wasm[7])<<24; v != 1 {
		return nil, fmt.Errorf("%w (binary format version %#x; only version 1 is supported)", ErrNotWasm, v)
	}
	p := &parsed{memImport: -1}
	info := &p.info
	d := &decoder{buf: wasm, pos: 8, end: len(wasm)}
	var (
		lastRank               int
		types                  = -1 // -1: no type section seen
		codeSeen               bool
		importedFuncs, funcs   int
		importedTables, tables int
		importedTags, tags     int
	)
	for d.pos < len(wasm) {
		start := d.pos
		d.section, d.end = "", len(wasm)
		id, _ := d.readByte()
		if int(id) >= len(sectionNames) {
			d.pos--
			return nil, d.fail("unknown section id %d", id)
		}
		name := sectionNames[id]
		size, err := d.u32()
		if err != nil {
			return nil, err
		}
		if uint64(size) > uint64(d.remaining()) {
			return nil, d.fail("%s section size %d exceeds the %d bytes left", name, size, d.remaining())
		}
		if id != secCustom {
			r := sectionRank[id]
			if r == lastRank {
				return nil, fmt.Errorf("%w: duplicate %s section (at byte %d)", ErrMalformed, name, start)
			}
			if r < lastRank {
				return nil, fmt.Errorf("%w: %s section out of order (at byte %d)", ErrMalformed, name, start)
			}
			lastRank = r
		}
		d.section, d.end = name, d.pos+int(size)

		switch id {
		case secCustom:
			cname, err := d.nameBytes("custom section name")
			if err != nil {
				return nil, err
			}
			if string(cname) == "name" {
				// wazero decodes it, trusting its counts.
				d.section = `"name" custom`
				if err := d.nameSection(); err != nil {
					return nil, err
				}
			}
			d.pos = d.end

		case secType:
			n, err := d.count("types", 3)
			if err != nil {
				return nil, err
			}
			for range n {
				if err := d.funcType(); err != nil {
					return nil, err
				}
			}
			types = n

		case secImport:
			n, err := d.count("imports", 4)
			if err != nil {
				return nil, err
			}
			info.Imports = make([]Import, 0, n)
			for range n {
				var im Import
				if im.Module, err = d.name("import module name"); err != nil {
					return nil, err
				}
				if im.Name, err = d.name("import name"); err != nil {
					return nil, err
				}
				kind, err := d.readByte()
				if err != nil {
					return nil, err
				}
				im.Kind = Kind(kind)
				switch im.Kind {
				case KindFunc:
					im.Index = uint32(importedFuncs)
					importedFuncs++
					if im.TypeIndex, err = d.u32(); err == nil && types >= 0 && uint64(im.TypeIndex) >= uint64(types) {
						return nil, d.invalid("import %q %q has type %d, but the module has %d types", im.Module, im.Name, im.TypeIndex, types)
					}
				case KindTable:
					im.Index = uint32(importedTables)
					importedTables++
					err = d.tableType()
				case KindMemory:
					var m MemoryInfo
					if m, err = d.memLimits(); err == nil {
						im.Index = uint32(info.Memories)
						if info.Memories == 0 {
							m.Imported = true
							info.Memory = m
							p.memImport = len(info.Imports)
						}
						info.Memories++
					}
				case KindGlobal:
					im.Index = uint32(info.ImportedGlobals)
					info.ImportedGlobals++
					im.Global, err = d.globalType()
				case KindTag:
					im.Index = uint32(importedTags)
					importedTags++
					im.TypeIndex, err = d.tagType()
				default:
					d.pos--
					return nil, d.fail("import kind 0x%02x is unknown", kind)
				}
				if err != nil {
					return nil, err
				}
				info.Imports = append(info.Imports, im)
			}

		case secFunction:
			n, err := d.count("functions", 1)
			if err != nil {
				return nil, err
			}
			for i := range n {
				t, err := d.u32()
				if err != nil {
					return nil, err
				}
				if uint64(t) >= uint64(max(types, 0)) {
					return nil, d.invalid("function %d has type %d, but the module has %d types", importedFuncs+i, t, max(types, 0))
				}
			}
			funcs = n

		case secTable:
			n, err := d.count("tables", 3)
			if err != nil {
				return nil, err
			}
			for range n {
				if err := d.tableType(); err != nil {
					return nil, err
				}
			}
			tables = n

		case secMemory:
			n, err := d.count("memories", 2)
			if err != nil {
				return nil, err
			}
			for range n {
				m, err := d.memLimits()
				if err != nil {
					return nil, err
				}
				if info.Memories == 0 {
					info.Memory = m
				}
				info.Memories++
			}

		case secTag:
			n, err := d.count("tags", 2)
			if err != nil {
				return nil, err
			}
			for range n {
				if _, err := d.tagType(); err != nil {
					return nil, err
				}
			}
			tags = n

		case secGlobal:
			n, err := d.count("globals", 3)
			if err != nil {
				return nil, err
			}
			if uint64(info.ImportedGlobals)+uint64(n) > math.MaxUint32 {
				return nil, d.invalid("too many globals")
			}
			info.Globals = make([]Global, 0, n)
			for range n {
				g, err := d.globalType()
				if err != nil {
					return nil, err
				}
				if err := d.constExpr(); err != nil {
					return nil, err
				}
				info.Globals = append(info.Globals, g)
			}

		case secExport:
			n, err := d.count("exports", 3)
			if err != nil {
				return nil, err
			}
			info.Exports = make([]Export, 0, n)
			exportNames := make(map[string]struct{}, n)
			for range n {
				var e Export
				if e.Name, err = d.name("export name"); err != nil {
					return nil, err
				}
				if _, dup := exportNames[e.Name]; dup {
					return nil, d.invalid("duplicate export name %q", e.Name)
				}
				exportNames[e.Name] = struct{}{}
				kind, err := d.readByte()
				if err != nil {
					return nil, err
				}
				e.Kind = Kind(kind)
				if e.Index, err = d.u32(); err != nil {
					return nil, err
				}
				var limit int
				switch e.Kind {
				case KindFunc:
					limit = importedFuncs + funcs
				case KindTable:
					limit = importedTables + tables
				case KindMemory:
					limit = info.Memories
				case KindGlobal:
					limit = info.ImportedGlobals + len(info.Globals)
				case KindTag:
					limit = importedTags + tags
				default:
					return nil, d.fail("export %q has unknown kind 0x%02x", e.Name, kind)
				}
				if uint64(e.Index) >= uint64(limit) {
					return nil, d.invalid("export %q refers to %s %d, but the module has %d", e.Name, e.Kind, e.Index, limit)
				}
				info.Exports = append(info.Exports, e)
			}

		case secStart:
			f, err := d.u32()
			if err != nil {
				return nil, err
			}
			if uint64(f) >= uint64(importedFuncs+funcs) {
				return nil, d.invalid("start function %d does not exist (the module has %d functions)", f, importedFuncs+funcs)
			}
			info.HadStart, info.StartFunc = true, f

		case secDataCount:
			if _, err := d.u32(); err != nil {
				return nil, err
			}

		case secElement:
			n, err := d.count("element segments", 3)
			if err != nil {
				return nil, err
			}
			for range n {
				if err := d.elementSegment(); err != nil {
					return nil, err
				}
			}

		case secCode:
			codeSeen = true
			n, err := d.count("function bodies", 2)
			if err != nil {
				return nil, err
			}
			if n != funcs {
				return nil, d.invalid("%d function bodies for %d functions", n, funcs)
			}
			for i := range n {
				if err := d.functionBody(importedFuncs + i); err != nil {
					return nil, err
				}
			}

		case secData:
			n, err := d.count("data segments", 2)
			if err != nil {
				return nil, err
			}
			for range n {
				if err := d.dataSegment(); err != nil {
					return nil, err
				}
			}
		}
		if d.pos != d.end {
			return nil, d.fail("%d bytes left over at the end of the section", d.end-d.pos)
		}
		p.sections = append(p.sections, span{id: id, start: start, end: d.end})
	}
	if funcs > 0 && !codeSeen {
		return nil, fmt.Errorf("%w: %d functions but no code section", ErrInvalid, funcs)
	}

	// Name globals and memory 0 after their exports, preferring the host's.
	for _, e := range info.Exports {
		switch {
		case e.Kind == KindGlobal && int(e.Index) >= info.ImportedGlobals:
			g := &info.Globals[int(e.Index)-info.ImportedGlobals]
			if g.ExportName == "" || e.Name == GlobalExportName(int(e.Index)-info.ImportedGlobals) {
				g.ExportName = e.Name
			}
		case e.Kind == KindMemory && e.Index == 0:
			if info.Memory.ExportName == "" || e.Name == MemoryExport {
				info.Memory.ExportName = e.Name
			}
		}
	}
	return p, nil
}

// check applies Rewrite's refusals to a parsed module.
func (p *parsed) check() error {
	info := &p.info
	if p.memImport >= 0 {
		im := info.Imports[p.memImport]
		return fmt.Errorf("%w (import %q %q)", ErrImportedMemory, im.Module, im.Name)
	}
	switch {
	case info.Memories > 1:
		return fmt.Errorf("%w (the module has %d)", ErrMultipleMemories, info.Memories)
	case info.Memories == 0:
		return ErrNoMemory
	case info.Memory.Shared:
		return ErrSharedMemory
	}
	for i, g := range info.Globals {
		switch {
		case g.Type == TypeV128:
			return fmt.Errorf("%w (global %d)", ErrV128Global, info.ImportedGlobals+i)
		case g.Mutable && (g.Type == TypeFuncref || g.Type == TypeExternref):
			return fmt.Errorf("%w (global %d)", ErrRefGlobal, info.ImportedGlobals+i)
		}
	}
	for _, e := range info.Exports {
		if strings.HasPrefix(e.Name, ReservedPrefix) {
			return fmt.Errorf("%w (the module exports %q)", ErrReservedExport, e.Name)
		}
	}
	return nil
}

// Rewrite parses a WebAssembly 1.0/2.0 binary module and returns a rewritten
// copy plus facts about it (see the package documentation for what changes).
// It refuses, with an error wrapping one of the Err values of this package,
// modules that are malformed or that cannot be snapshotted. The output is a
// deterministic function of the input; wasm is not modified.
func Rewrite(wasm []byte) (out []byte, info *Info, err error) {
	p, err := parse(wasm)
	if err != nil {
		return nil, nil, err
	}
	if err := p.check(); err != nil {
		return nil, nil, err
	}
	info = &p.info

	exports := make([]Export, 0, len(info.Exports)+len(info.Globals)+2)
	exports = append(exports, info.Exports...)
	for i := range info.Globals {
		name := GlobalExportName(i)
		exports = append(exports, Export{Name: name, Kind: KindGlobal, Index: uint32(info.ImportedGlobals + i)})
		info.Globals[i].ExportName = name
	}
	exports = append(exports, Export{Name: MemoryExport, Kind: KindMemory, Index: 0})
	info.Memory.ExportName = MemoryExport
	if info.HadStart {
		exports = append(exports, Export{Name: StartExport, Kind: KindFunc, Index: info.StartFunc})
	}
	info.Exports = exports

	body := appendULEB(nil, uint64(len(exports)))
	for _, e := range exports {
		body = appendULEB(body, uint64(len(e.Name)))
		body = append(body, e.Name...)
		body = append(body, byte(e.Kind))
		body = appendULEB(body, uint64(e.Index))
	}
	if uint64(len(body)) > math.MaxUint32 {
		return nil, nil, fmt.Errorf("%w: export section too large", ErrInvalid)
	}

	// Lift the active data segments out (see Info.Data).
	var (
		dataSec                 = -1
		dataCount, dataReplaced bool
		newData                 []byte
	)
	for i, s := range p.sections {
		switch s.id {
		case secData:
			dataSec = i
		case secDataCount:
			dataCount = true
		}
	}
	if dataSec >= 0 {
		info.Data, newData, dataReplaced = liftData(wasm, p.sections[dataSec], dataCount, info.Memory.Min)
	}

	out = make([]byte, 0, len(wasm)+len(body)+6)
	out = append(out, wasm[:8]...)
	exportDone := false
	emitExport := func() {
		out = append(out, secExport)
		out = appendULEB(out, uint64(len(body)))
		out = append(out, body...)
		exportDone = true
	}
	for _, s := range p.sections {
		if s.id != secCustom && !exportDone && sectionRank[s.id] >= sectionRank[secExport] {
			emitExport()
		}
		if s.id == secExport || s.id == secStart {
			continue
		}
		if s.id == secData && dataReplaced {
			out = append(out, newData...)
			continue
		}
		out = append(out, wasm[s.start:s.end]...)
	}
	if !exportDone {
		emitExport()
	}
	return out, info, nil
}

// appendULEB appends v as an unsigned LEB128 integer.
func appendULEB(b []byte, v uint64) []byte {
	for {
		c := byte(v & 0x7F)
		v >>= 7
		if v == 0 {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}
