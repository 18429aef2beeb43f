// The package's entry for `import * as wk from "wasmkeep-assemblyscript"`
// (asc resolves a package to its index.ts): the SDK's API.
export * from "./assembly/index";
