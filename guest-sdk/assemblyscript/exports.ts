// `export * from "wasmkeep-assemblyscript/exports"` in a room's entry file
// makes the module export the ABI's entry points.
export * from "./assembly/exports";
