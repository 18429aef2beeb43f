// The package's entry for `import * as wk from "wasmkeep-assemblyscript"`
// (asc resolves a package to its index.ts): the SDK's API.
export * from "./assembly/index";
// asc's `export *` forwards only what a module declares itself, not what
// it re-exports, so assembly/index.ts's re-export of Header (declared in
// records.ts) is restated here: without it `wk.Header` does not resolve.
export { Header } from "./assembly/records";
