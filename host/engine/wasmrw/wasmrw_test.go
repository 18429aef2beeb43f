package wasmrw

import (
	"bytes"
	"errors"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
)

type rewriteCase struct {
	name string
	in   []byte
	want []byte // expected output, if non-nil
	info *Info  // expected Info from Rewrite, if non-nil
}

// memWK is the export the rewrite always adds.
var memWK = exp(MemoryExport, KindMemory, 0)

func rewriteCases() []rewriteCase {
	return []rewriteCase{
		{
			name: "memory only",
			in:   module(memSec(mem(1))),
			want: module(memSec(mem(1)), exportSec(memWK)),
			info: &Info{
				Memory:   MemoryInfo{Min: 1, ExportName: MemoryExport},
				Memories: 1,
				Exports:  []Export{{MemoryExport, KindMemory, 0}},
			},
		},
		{
			name: "imported and defined globals",
			in: module(
				typeSec(),
				importSec(
					imp("env", "f", 0x00, 0x00),
					imp("env", "g1", 0x03, TypeI32, 0),
					imp("env", "t", 0x01, TypeFuncref, 0x00, 0x01),
					imp("env", "g2", 0x03, TypeI64, 1),
				),
				memSec(memMax(2, 10)),
				globalSec(
					glob(TypeI32, true, i32c(-1)...),
					glob(TypeF64, false, 0x44, 0, 0, 0, 0, 0, 0, 0xF0, 0x3F),
					glob(TypeFuncref, false, 0xD0, 0x70),
				),
			),
			want: module(
				typeSec(),
				importSec(
					imp("env", "f", 0x00, 0x00),
					imp("env", "g1", 0x03, TypeI32, 0),
					imp("env", "t", 0x01, TypeFuncref, 0x00, 0x01),
					imp("env", "g2", 0x03, TypeI64, 1),
				),
				memSec(memMax(2, 10)),
				globalSec(
					glob(TypeI32, true, i32c(-1)...),
					glob(TypeF64, false, 0x44, 0, 0, 0, 0, 0, 0, 0xF0, 0x3F),
					glob(TypeFuncref, false, 0xD0, 0x70),
				),
				exportSec(
					exp("__wk_g0", KindGlobal, 2),
					exp("__wk_g1", KindGlobal, 3),
					exp("__wk_g2", KindGlobal, 4),
					memWK,
				),
			),
			info: &Info{
				Globals: []Global{
					{TypeI32, true, "__wk_g0"},
					{TypeF64, false, "__wk_g1"},
					{TypeFuncref, false, "__wk_g2"},
				},
				ImportedGlobals: 2,
				Memory:          MemoryInfo{Min: 2, Max: 10, HasMax: true, ExportName: MemoryExport},
				Memories:        1,
				Imports: []Import{
					{Module: "env", Name: "f", Kind: KindFunc, Index: 0, TypeIndex: 0},
					{Module: "env", Name: "g1", Kind: KindGlobal, Index: 0, Global: Global{Type: TypeI32}},
					{Module: "env", Name: "t", Kind: KindTable, Index: 0},
					{Module: "env", Name: "g2", Kind: KindGlobal, Index: 1, Global: Global{Type: TypeI64, Mutable: true}},
				},
				Exports: []Export{
					{"__wk_g0", KindGlobal, 2},
					{"__wk_g1", KindGlobal, 3},
					{"__wk_g2", KindGlobal, 4},
					{MemoryExport, KindMemory, 0},
				},
			},
		},
		{
			name: "start section",
			in: module(
				typeSec(),
				importSec(imp("env", "h", 0x00, 0x00)),
				funcSec(0, 0),
				memSec(mem(1)),
				globalSec(glob(TypeI32, true, i32c(7)...)),
				startSec(2),
				codeSec(fn(), fn(0x41, 42, 0x24, 0)),
			),
			want: module(
				typeSec(),
				importSec(imp("env", "h", 0x00, 0x00)),
				funcSec(0, 0),
				memSec(mem(1)),
				globalSec(glob(TypeI32, true, i32c(7)...)),
				exportSec(exp("__wk_g0", KindGlobal, 0), memWK, exp(StartExport, KindFunc, 2)),
				codeSec(fn(), fn(0x41, 42, 0x24, 0)),
			),
			info: &Info{
				Globals:   []Global{{TypeI32, true, "__wk_g0"}},
				HadStart:  true,
				StartFunc: 2,
				Memory:    MemoryInfo{Min: 1, ExportName: MemoryExport},
				Memories:  1,
				Imports:   []Import{{Module: "env", Name: "h", Kind: KindFunc}},
				Exports: []Export{
					{"__wk_g0", KindGlobal, 0},
					{MemoryExport, KindMemory, 0},
					{StartExport, KindFunc, 2},
				},
			},
		},
		{
			name: "existing exports kept",
			in: module(
				typeSec(),
				funcSec(1),
				memSec(mem(3)),
				globalSec(glob(TypeI32, true, i32c(1024)...), glob(TypeI64, true, i64c(-1<<63)...)),
				exportSec(
					exp("memory", KindMemory, 0),
					exp("sp", KindGlobal, 0),
					exp("f", KindFunc, 0),
					exp("also_sp", KindGlobal, 0),
				),
				codeSec(fn(0x41, 1)),
			),
			want: module(
				typeSec(),
				funcSec(1),
				memSec(mem(3)),
				globalSec(glob(TypeI32, true, i32c(1024)...), glob(TypeI64, true, i64c(-1<<63)...)),
				exportSec(
					exp("memory", KindMemory, 0),
					exp("sp", KindGlobal, 0),
					exp("f", KindFunc, 0),
					exp("also_sp", KindGlobal, 0),
					exp("__wk_g0", KindGlobal, 0),
					exp("__wk_g1", KindGlobal, 1),
					memWK,
				),
				codeSec(fn(0x41, 1)),
			),
			info: &Info{
				Globals:  []Global{{TypeI32, true, "__wk_g0"}, {TypeI64, true, "__wk_g1"}},
				Memory:   MemoryInfo{Min: 3, ExportName: MemoryExport},
				Memories: 1,
				Exports: []Export{
					{"memory", KindMemory, 0},
					{"sp", KindGlobal, 0},
					{"f", KindFunc, 0},
					{"also_sp", KindGlobal, 0},
					{"__wk_g0", KindGlobal, 0},
					{"__wk_g1", KindGlobal, 1},
					{MemoryExport, KindMemory, 0},
				},
			},
		},
		{
			name: "custom sections kept in place",
			in: module(
				customSec("first", 1, 2, 3),
				typeSec(),
				funcSec(0),
				customSec("between", 0xFF),
				memSec(mem(1)),
				globalSec(glob(TypeF32, true, 0x43, 0, 0, 0x80, 0x3F)),
				customSec("after global"),
				startSec(0),
				customSec("after start", 9),
				codeSec(fn()),
				customSec("name", 1, 4, 1, 0, 1, 'f'),
			),
			want: module(
				customSec("first", 1, 2, 3),
				typeSec(),
				funcSec(0),
				customSec("between", 0xFF),
				memSec(mem(1)),
				globalSec(glob(TypeF32, true, 0x43, 0, 0, 0x80, 0x3F)),
				customSec("after global"),
				exportSec(exp("__wk_g0", KindGlobal, 0), memWK, exp(StartExport, KindFunc, 0)),
				customSec("after start", 9),
				codeSec(fn()),
				customSec("name", 1, 4, 1, 0, 1, 'f'),
			),
		},
		{
			name: "export section appended at the end",
			in:   module(customSec("a"), memSec(mem(0)), globalSec(glob(TypeExternref, false, 0xD0, 0x6F)), customSec("z", 1)),
			want: module(customSec("a"), memSec(mem(0)), globalSec(glob(TypeExternref, false, 0xD0, 0x6F)), customSec("z", 1),
				exportSec(exp("__wk_g0", KindGlobal, 0), memWK)),
		},
		{
			name: "every constant expression",
			in: module(
				typeSec(),
				importSec(imp("env", "base", 0x03, TypeI32, 0)),
				funcSec(0),
				memSec(mem(1)),
				globalSec(
					glob(TypeI32, false, i32c(-1<<31)...),
					glob(TypeI32, false, i32c(1<<31-1)...),
					glob(TypeI64, false, i64c(1<<63-1)...),
					glob(TypeF64, true, 0x44, 1, 2, 3, 4, 5, 6, 7, 8),
					glob(TypeFuncref, false, 0xD2, 0x00),
					glob(TypeI32, true, cat(bs(0x23, 0), i32c(8), bs(0x6A), i32c(2), bs(0x6C), i32c(1), bs(0x6B))...),
					glob(TypeI64, true, cat(i64c(5), i64c(6), bs(0x7C), i64c(7), bs(0x7E), i64c(1), bs(0x7D))...),
					// Non-minimal but valid LEB128 encodings.
					glob(TypeI32, false, 0x41, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F),
					glob(TypeI64, false, 0x42, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00),
				),
				exportSec(exp("f", KindFunc, 0)),
				codeSec(fn()),
			),
		},
		{
			name: "element, data count and data sections",
			in: module(
				typeSec(),
				funcSec(0),
				section(secTable, vec(bs(TypeFuncref, 0x00, 1))),
				memSec(mem(1)),
				section(secElement, vec(cat(bs(0), i32c(0), bs(0x0B), vec(bs(0))))),
				section(secDataCount, bs(1)),
				codeSec(fn()),
				section(secData, vec(cat(bs(0), i32c(16), bs(0x0B), str("hello")))),
			),
			want: module(
				typeSec(),
				funcSec(0),
				section(secTable, vec(bs(TypeFuncref, 0x00, 1))),
				memSec(mem(1)),
				exportSec(memWK),
				section(secElement, vec(cat(bs(0), i32c(0), bs(0x0B), vec(bs(0))))),
				section(secDataCount, bs(1)),
				codeSec(fn()),
				section(secData, vec(cat(bs(0), i32c(16), bs(0x0B), str("")))),
			),
		},
		{
			name: "every element and data segment form, name section",
			in: module(
				typeSec(),
				funcSec(0, 1),
				section(secTable, vec(bs(TypeFuncref, 0x00, 4), bs(TypeExternref, 0x01, 0, 4))),
				memSec(memMax(1, 1)),
				section(secElement, vec(
					cat(bs(0), i32c(0), bs(0x0B), vec(bs(0), bs(1))),
					cat(bs(1, 0), vec(bs(1))),
					cat(bs(2, 0), i32c(2), bs(0x0B), bs(0), vec(bs(0))),
					cat(bs(3, 0), vec()),
					cat(bs(4), i32c(1), bs(0x0B), vec(bs(0xD2, 0, 0x0B), bs(0xD0, 0x70, 0x0B))),
					cat(bs(5, TypeFuncref), vec(bs(0xD2, 1, 0x0B))),
					cat(bs(6, 1), i32c(0), bs(0x0B), bs(TypeExternref), vec(bs(0xD0, 0x6F, 0x0B))),
					cat(bs(7, TypeFuncref), vec(bs(0xD0, 0x70, 0x0B))),
				)),
				section(secDataCount, bs(3)),
				codeSec(withSize(bs(2, 1, TypeI32, 2, TypeV128, 0x0B)), fn(0x41, 0)),
				section(secData, vec(
					cat(bs(0), i32c(16), bs(0x0B), str("abc")),
					cat(bs(1), str("passive")),
					cat(bs(2, 0), i32c(32), bs(0x0B), str("")),
				)),
				customSec("name", cat(
					bs(0), str(string(str("mod"))),
					bs(1), str(string(vec(cat(bs(0), str("f")), cat(bs(1), str("g"))))),
					bs(2), str(string(vec(cat(bs(0), vec(cat(bs(0), str("x")))), cat(bs(1), vec())))),
					bs(9, 2, 0xAA, 0xBB),
				)...),
			),
		},
		{
			name: "tags",
			in: module(
				typeSec(),
				importSec(imp("env", "e", 0x04, 0x00, 0x00)),
				memSec(mem(1)),
				section(secTag, vec(bs(0, 0), bs(0, 0))),
				globalSec(glob(TypeI32, true, i32c(0)...)),
				exportSec(exp("e2", KindTag, 2)),
			),
			want: module(
				typeSec(),
				importSec(imp("env", "e", 0x04, 0x00, 0x00)),
				memSec(mem(1)),
				section(secTag, vec(bs(0, 0), bs(0, 0))),
				globalSec(glob(TypeI32, true, i32c(0)...)),
				exportSec(exp("e2", KindTag, 2), exp("__wk_g0", KindGlobal, 0), memWK),
			),
		},
		{
			name: "non-minimal section size kept",
			in:   cat(header, bs(secMemory, 0x83, 0x80, 0x80, 0x80, 0x00, 1, 0, 1)),
			want: cat(header, bs(secMemory, 0x83, 0x80, 0x80, 0x80, 0x00, 1, 0, 1), exportSec(memWK)),
		},
	}
}

func TestRewrite(t *testing.T) {
	for _, tc := range rewriteCases() {
		t.Run(tc.name, func(t *testing.T) {
			in := bytes.Clone(tc.in)
			out, info, err := Rewrite(in)
			if err != nil {
				t.Fatalf("Rewrite: %v", err)
			}
			if !bytes.Equal(in, tc.in) {
				t.Fatal("Rewrite modified its input")
			}
			if tc.want != nil && !bytes.Equal(out, tc.want) {
				t.Fatalf("output\n got % x\nwant % x", out, tc.want)
			}
			if tc.info != nil && !reflect.DeepEqual(info, tc.info) {
				t.Fatalf("info\n got %+v\nwant %+v", info, tc.info)
			}
			checkRewritten(t, tc.in, out, info)

			out2, info2, err := Rewrite(tc.in)
			if err != nil || !bytes.Equal(out, out2) || !reflect.DeepEqual(info, info2) {
				t.Fatalf("second Rewrite differs (err %v)", err)
			}
		})
	}
}

// checkRewritten checks the invariants of a successful rewrite.
func checkRewritten(t testing.TB, in, out []byte, info *Info) {
	t.Helper()
	orig, err := Parse(in)
	if err != nil {
		t.Fatalf("Parse(input) fails after Rewrite succeeded: %v", err)
	}
	got, err := Parse(out)
	if err != nil {
		t.Fatalf("Parse(output): %v", err)
	}
	if got.HadStart {
		t.Fatal("output still has a start section")
	}
	if got.ImportedGlobals != orig.ImportedGlobals || len(got.Globals) != len(orig.Globals) {
		t.Fatalf("globals changed: %d+%d -> %d+%d", orig.ImportedGlobals, len(orig.Globals), got.ImportedGlobals, len(got.Globals))
	}
	for i, g := range got.Globals {
		if g.Type != orig.Globals[i].Type || g.Mutable != orig.Globals[i].Mutable {
			t.Fatalf("global %d changed: %+v -> %+v", i, orig.Globals[i], g)
		}
		if g.ExportName != GlobalExportName(i) || info.Globals[i] != g {
			t.Fatalf("global %d: Parse says %+v, Rewrite says %+v", i, g, info.Globals[i])
		}
	}
	if got.Memory != info.Memory || got.Memory.ExportName != MemoryExport || got.Memories != 1 {
		t.Fatalf("memory: Parse says %+v, Rewrite says %+v", got.Memory, info.Memory)
	}
	if !reflect.DeepEqual(got.Exports, info.Exports) || !reflect.DeepEqual(got.Imports, orig.Imports) {
		t.Fatalf("exports/imports: Parse says %+v / %+v, Rewrite says %+v / %+v", got.Exports, got.Imports, info.Exports, orig.Imports)
	}
	if !slices.Equal(got.Exports[:len(orig.Exports)], orig.Exports) {
		t.Fatalf("original exports not kept first: %+v", got.Exports)
	}
	wantAdded := len(orig.Globals) + 1
	if orig.HadStart {
		wantAdded++
		last := got.Exports[len(got.Exports)-1]
		if last != (Export{StartExport, KindFunc, orig.StartFunc}) || !info.HadStart || info.StartFunc != orig.StartFunc {
			t.Fatalf("start not exported: %+v", last)
		}
	}
	if len(got.Exports) != len(orig.Exports)+wantAdded {
		t.Fatalf("%d exports, want %d", len(got.Exports), len(orig.Exports)+wantAdded)
	}
	if _, _, err := Rewrite(out); !errors.Is(err, ErrReservedExport) {
		t.Fatalf("Rewrite(output) = %v, want ErrReservedExport", err)
	}
}

func TestParseOriginalNames(t *testing.T) {
	in := rewriteCases()[3].in // existing exports kept
	info, err := Parse(in)
	if err != nil {
		t.Fatal(err)
	}
	if info.Globals[0].ExportName != "sp" || info.Globals[1].ExportName != "" || info.Memory.ExportName != "memory" {
		t.Fatalf("names: %+v %+v", info.Globals, info.Memory)
	}
}

func TestKindString(t *testing.T) {
	for k, want := range map[Kind]string{KindFunc: "func", KindTable: "table", KindMemory: "memory",
		KindGlobal: "global", KindTag: "tag", 9: "kind(0x09)"} {
		if k.String() != want {
			t.Errorf("%d: %q", k, k.String())
		}
	}
}

type refusalCase struct {
	name  string
	in    []byte
	is    error
	parse bool   // Parse refuses it too
	msg   string // substring of the error message
}

func refusalCases() []refusalCase {
	m1 := memSec(mem(1))
	return []refusalCase{
		{"empty", nil, ErrNotWasm, true, "not a WebAssembly module"},
		{"short", []byte("\x00asm\x01"), ErrNotWasm, true, "not a WebAssembly module"},
		{"bad magic", []byte("\x7fELF\x01\x00\x00\x00"), ErrNotWasm, true, "not a WebAssembly module"},
		{"component", []byte("\x00asm\x0d\x00\x01\x00"), ErrNotWasm, true, "version 0x1000d"},
		{"version 2", []byte("\x00asm\x02\x00\x00\x00"), ErrNotWasm, true, "not a WebAssembly module"},
		{"no memory", module(), ErrNoMemory, false, "no memory"},
		{"no memory with globals", module(globalSec(glob(TypeI32, true, i32c(0)...))), ErrNoMemory, false, ""},
		{"truncated section header", cat(header, bs(secMemory)), ErrMalformed, true, "unexpected end of module"},
		{"truncated section", cat(header, bs(secMemory, 5, 1, 0)), ErrMalformed, true, "exceeds the 2 bytes left"},
		{"truncated limits", module(section(secMemory, bs(1, 1, 1))), ErrMalformed, true, "memory section: unexpected end of section"},
		{"section size LEB too long", cat(header, bs(secMemory, 0x83, 0x80, 0x80, 0x80, 0x80, 0x00, 1, 0, 1)), ErrMalformed, true, "LEB128"},
		{"section size LEB overflow", cat(header, bs(secMemory, 0x83, 0x80, 0x80, 0x80, 0x10, 1, 0, 1)), ErrMalformed, true, "LEB128"},
		{"count LEB overflow", module(section(secMemory, bs(0xFF, 0xFF, 0xFF, 0xFF, 0x7F))), ErrMalformed, true, "LEB128"},
		{"i32.const LEB overflow", module(m1, globalSec(glob(TypeI32, false, 0x41, 0x80, 0x80, 0x80, 0x80, 0x70))), ErrMalformed, true, "LEB128"},
		{"i32.const LEB too long", module(m1, globalSec(glob(TypeI32, false, 0x41, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00))), ErrMalformed, true, "LEB128"},
		{"i64.const LEB overflow", module(m1, globalSec(glob(TypeI64, false, 0x42, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x02))), ErrMalformed, true, "LEB128"},
		{"negative i32.const LEB overflow", module(m1, globalSec(glob(TypeI32, false, 0x41, 0xFF, 0xFF, 0xFF, 0xFF, 0x4F))), ErrMalformed, true, "LEB128"},
		{"duplicate memory section", module(m1, m1), ErrMalformed, true, "duplicate memory section"},
		{"duplicate export section", module(m1, exportSec(), exportSec()), ErrMalformed, true, "duplicate export section"},
		{"global before memory", module(globalSec(), m1), ErrMalformed, true, "memory section out of order"},
		{"tag after global", module(m1, globalSec(), section(secTag, vec())), ErrMalformed, true, "tag section out of order"},
		{"data count after code", module(m1, codeSec(), section(secDataCount, bs(0))), ErrMalformed, true, "data count section out of order"},
		{"unknown section", module(m1, section(14)), ErrMalformed, true, "unknown section id 14"},
		{"section too long for contents", module(section(secMemory, vec(mem(1)), bs(0))), ErrMalformed, true, "1 bytes left over"},
		{"custom name overruns", module(m1, section(secCustom, bs(5, 'a'))), ErrMalformed, true, "custom section name length 5"},
		{"custom name not UTF-8", module(m1, section(secCustom, bs(2, 0xC3, 0x28))), ErrMalformed, true, "UTF-8"},
		{"export name not UTF-8", module(m1, exportSec(cat(bs(3, 0xED, 0xA0, 0x80), bs(2, 0)))), ErrMalformed, true, "UTF-8"},
		{"huge import count", module(section(secImport, bs(0xFF, 0xFF, 0xFF, 0xFF, 0x0F, 0, 0, 0, 0))), ErrMalformed, true, "4294967295 imports do not fit"},
		{"huge global count", module(m1, section(secGlobal, bs(0xFF, 0xFF, 0xFF, 0xFF, 0x0F, 0x7F, 0, 0x0B))), ErrMalformed, true, "globals do not fit"},
		{"huge export count", module(m1, section(secExport, bs(0x80, 0x80, 0x04, 0, 2, 0))), ErrMalformed, true, "exports do not fit"},
		{"huge function count", module(section(secFunction, bs(0x80, 0x80, 0x80, 0x80, 0x01, 0))), ErrMalformed, true, "functions do not fit"},
		// Counts that wazero's decoder would trust: each of these small
		// modules makes CompileModule allocate gigabytes.
		{"huge result count", module(section(secType, bs(0x01, 0x60, 0x00, 0xA4, 0xA4, 0xA4, 0x30, 0x30, 0x30))), ErrMalformed, true, "results do not fit"},
		{"huge type count", module(section(secType, bs(0xFF, 0xFF, 0xFF, 0xFF, 0x0F, 0x60, 0, 0))), ErrMalformed, true, "types do not fit"},
		{"huge function name count", module(m1, section(secCustom, str("name"), bs(1, 5, 0xFF, 0xFF, 0xFF, 0x7F, 0))), ErrMalformed, true, `"name" custom section: 268435455 names do not fit`},
		{"huge local name count", module(m1, section(secCustom, str("name"), bs(2, 4, 1, 0, 0xFF, 0x7F))), ErrMalformed, true, "names do not fit"},
		{"huge name subsection", module(m1, section(secCustom, str("name"), bs(0, 0xFF, 0xFF, 0xFF, 0xFF, 0x0F))), ErrMalformed, true, "subsection 0"},
		{"huge locals", module(typeSec(), funcSec(0), m1, codeSec(cat(bs(7, 1), uleb(1<<28), bs(TypeI32, 0x0B)))), ErrLimit, true, "more than 50000 locals"},
		{"huge locals in two declarations", module(typeSec(), funcSec(0), m1, codeSec(withSize(cat(bs(2), uleb(25000), bs(TypeI32), uleb(25001), bs(TypeI64, 0x0B))))), ErrLimit, true, "locals"},
		{"huge function body", module(typeSec(), funcSec(0), m1, section(secCode, bs(1, 0xFF, 0xFF, 0xFF, 0xFF, 0x0F, 0, 0x0B))), ErrMalformed, true, "function body 0 of 4294967295 bytes"},
		{"huge local declaration count", module(typeSec(), funcSec(0), m1, codeSec(bs(6, 0xFF, 0xFF, 0xFF, 0xFF, 0x0F, 0x0B))), ErrMalformed, true, "local declarations do not fit"},
		{"huge element count", module(m1, section(secElement, bs(0xFF, 0xFF, 0xFF, 0xFF, 0x0F, 0))), ErrMalformed, true, "element segments do not fit"},
		{"huge element vector", module(m1, section(secElement, vec(cat(bs(1, 0), bs(0xFF, 0xFF, 0xFF, 0xFF, 0x0F))))), ErrMalformed, true, "function indices do not fit"},
		{"huge element expressions", module(m1, section(secElement, vec(cat(bs(5, TypeFuncref), bs(0xFF, 0xFF, 0xFF, 0xFF, 0x0F))))), ErrMalformed, true, "element expressions do not fit"},
		{"huge data segment", module(m1, section(secData, vec(cat(bs(1), bs(0xFF, 0xFF, 0xFF, 0xFF, 0x0F))))), ErrMalformed, true, "data segment of 4294967295 bytes"},
		{"huge data count", module(m1, section(secData, bs(0xFF, 0xFF, 0xFF, 0xFF, 0x0F, 1, 0))), ErrMalformed, true, "data segments do not fit"},
		{"huge custom section", cat(module(m1), bs(0, 0xFF, 0xFF, 0xFF, 0xFF, 0x0F, 1, 'x')), ErrMalformed, true, "custom section size 4294967295"},
		{"type form", module(section(secType, vec(bs(0x4E, 0, 0)))), ErrMalformed, true, "type form 0x4e"},
		{"bad element flags", module(m1, section(secElement, vec(bs(8, 0, 0)))), ErrMalformed, true, "element segment flags 8"},
		{"bad element kind", module(m1, section(secElement, vec(bs(1, 1, 0)))), ErrMalformed, true, "element kind 0x01"},
		{"bad data flags", module(m1, section(secData, vec(bs(3, 0)))), ErrMalformed, true, "data segment flags 3"},
		{"function type out of range", module(typeSec(), funcSec(3), m1, codeSec(fn())), ErrInvalid, true, "function 0 has type 3, but the module has 3 types"},
		{"function without type section", module(funcSec(0), m1, codeSec(fn())), ErrInvalid, true, "has type 0, but the module has 0 types"},
		{"imported function type out of range", module(typeSec(), importSec(imp("env", "f", 0x00, 0x05)), m1), ErrInvalid, true, `import "env" "f" has type 5`},
		{"code without functions", module(typeSec(), m1, codeSec(fn())), ErrInvalid, true, "1 function bodies for 0 functions"},
		{"functions without code", module(typeSec(), funcSec(0), m1), ErrInvalid, true, "1 functions but no code section"},
		{"truncated function body", module(typeSec(), funcSec(0), m1, section(secCode, bs(1, 3, 1, 1))), ErrMalformed, true, "function body 0 of 3 bytes"},
		{"bad local type", module(typeSec(), funcSec(0), m1, codeSec(bs(4, 1, 1, 0x40, 0x0B))), ErrMalformed, true, "value type 0x40"},
		{"bad import kind", module(importSec(imp("a", "b", 0x05, 0))), ErrMalformed, true, "import kind 0x05"},
		{"bad export kind", module(m1, exportSec(exp("x", 7, 0))), ErrMalformed, true, "unknown kind 0x07"},
		{"bad value type", module(m1, globalSec(glob(0x7A, false, i32c(0)...))), ErrMalformed, true, "value type 0x7a"},
		{"typed reference global", module(m1, globalSec(cat(bs(0x64, 0x70, 0), bs(0xD2, 0, 0x0B)))), ErrMalformed, true, "value type 0x64"},
		{"bad mutability", module(m1, section(secGlobal, vec(bs(TypeI32, 2, 0x41, 0, 0x0B)))), ErrMalformed, true, "mutability"},
		{"bad const opcode", module(m1, globalSec(glob(TypeI32, false, 0x20, 0))), ErrMalformed, true, "opcode 0x20"},
		{"bad vector const opcode", module(m1, globalSec(glob(TypeV128, false, 0xFD, 13))), ErrMalformed, true, "vector opcode"},
		{"const without end", module(m1, section(secGlobal, vec(bs(TypeI32, 0, 0x41, 0)))), ErrMalformed, true, "unexpected end of section"},
		{"truncated f64.const", module(m1, section(secGlobal, vec(bs(TypeF64, 0, 0x44, 0, 0, 0)))), ErrMalformed, true, "unexpected end of section"},
		{"bad ref.null type", module(m1, globalSec(glob(TypeFuncref, false, 0xD0, 0x7F))), ErrMalformed, true, "reference type 0x7f"},
		{"bad memory flag", module(section(secMemory, vec(bs(0x08, 1)))), ErrMalformed, true, "memory limits flag 0x08"},
		{"bad table flag", module(m1[:0], section(secTable, vec(bs(TypeFuncref, 0x02, 1)))), ErrMalformed, true, "table limits flag 0x02"},
		{"table with init expression", module(section(secTable, vec(bs(0x40, 0, TypeFuncref, 0, 1, 0xD0, 0x70, 0x0B)))), ErrMalformed, true, "initializer expression"},
		{"bad tag attribute", module(section(secTag, vec(bs(1, 0)))), ErrMalformed, true, "tag attribute 0x01"},
		{"memory too large", module(memSec(mem(65537))), ErrInvalid, true, "at most 65536 pages"},
		{"memory max below min", module(memSec(memMax(2, 1))), ErrInvalid, true, "maximum 1 is below its minimum 2"},
		{"table max below min", module(section(secTable, vec(bs(TypeFuncref, 1, 2, 1)))), ErrInvalid, true, "table maximum"},
		{"duplicate export name", module(m1, exportSec(exp("m", KindMemory, 0), exp("m", KindMemory, 0))), ErrInvalid, true, `duplicate export name "m"`},
		{"export index out of range", module(m1, globalSec(glob(TypeI32, false, i32c(0)...)), exportSec(exp("g", KindGlobal, 1))), ErrInvalid, true, `export "g" refers to global 1, but the module has 1`},
		{"exported function missing", module(m1, exportSec(exp("f", KindFunc, 0))), ErrInvalid, true, "refers to func 0"},
		{"start index out of range", module(typeSec(), funcSec(0), m1, startSec(1), codeSec(fn())), ErrInvalid, true, "start function 1 does not exist"},
		{"imported memory", module(importSec(imp("env", "memory", 0x02, 0x00, 1))), ErrImportedMemory, false, `imported memory is not supported (import "env" "memory")`},
		{"imported and defined memory", module(importSec(imp("env", "memory", 0x02, 0x00, 1)), m1), ErrImportedMemory, false, ""},
		{"two memories", module(memSec(mem(1), mem(1))), ErrMultipleMemories, false, "more than one memory"},
		{"shared memory", module(memSec(bs(0x03, 1, 1))), ErrSharedMemory, false, "shared memory is not supported"},
		{"memory64", module(memSec(bs(0x04, 1))), ErrMemory64, true, "64-bit memory"},
		{"imported memory64", module(importSec(imp("env", "memory", 0x02, 0x05, 1, 2))), ErrMemory64, true, "64-bit memory"},
		{"v128 global", module(m1, globalSec(glob(TypeI32, true, i32c(0)...), glob(TypeV128, false, cat(bs(0xFD, 12), make([]byte, 16))...))), ErrV128Global, false, "v128 globals cannot be snapshotted (global 1)"},
		{"mutable funcref global", module(m1, globalSec(glob(TypeFuncref, true, 0xD0, 0x70))), ErrRefGlobal, false, "cannot be snapshotted"},
		{"mutable externref global", module(m1, globalSec(glob(TypeExternref, true, 0xD0, 0x6F))), ErrRefGlobal, false, "cannot be snapshotted"},
		{"reserved export name", module(m1, exportSec(exp("__wk_mem", KindMemory, 0))), ErrReservedExport, false, `exports "__wk_mem"`},
		{"reserved export prefix", module(typeSec(), funcSec(0), m1, exportSec(exp("__wk_", KindFunc, 0)), codeSec(fn())), ErrReservedExport, false, "reserved"},
	}
}

func TestRefusals(t *testing.T) {
	for _, tc := range refusalCases() {
		t.Run(tc.name, func(t *testing.T) {
			out, info, err := Rewrite(tc.in)
			if !errors.Is(err, tc.is) {
				t.Fatalf("Rewrite error %v, want %v", err, tc.is)
			}
			if out != nil || info != nil {
				t.Fatal("Rewrite returned output with an error")
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("error %q does not mention %q", err, tc.msg)
			}
			_, perr := Parse(tc.in)
			if tc.parse && !errors.Is(perr, tc.is) {
				t.Fatalf("Parse error %v, want %v", perr, tc.is)
			}
			if !tc.parse && perr != nil {
				t.Fatalf("Parse refuses a well-formed module: %v", perr)
			}
		})
	}
}

// TestHugeCountsAllocateLittle checks that counts read from the input are
// bounded by its size before anything is allocated.
func TestHugeCountsAllocateLittle(t *testing.T) {
	for _, tc := range refusalCases() {
		if !strings.HasPrefix(tc.name, "huge") && !strings.Contains(tc.name, "LEB") {
			continue
		}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for range 10 {
			_, _, _ = Rewrite(tc.in)
		}
		runtime.ReadMemStats(&after)
		if n := after.TotalAlloc - before.TotalAlloc; n > 64<<10 {
			t.Errorf("%s: 10 Rewrites allocated %d bytes", tc.name, n)
		}
	}
}
