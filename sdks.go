// Package wasmkeep holds the guest SDKs' sources, embedded, so that the
// wasmkeep binary carries them: `wasmkeep init` writes them into a new
// room project, which then builds with no module or package published
// anywhere. The host is in host/..., the CLI in cmd/wasmkeep.
package wasmkeep

import "embed"

// SDKs are the files a room project needs of this repository: the Go
// SDK and the abi package it imports (tests among them, which init
// leaves out), the module's go.mod (for its go line), and the
// AssemblyScript SDK without its tests and examples.
//
//go:embed go.mod abi/*.go guest-sdk/go/*.go
//go:embed guest-sdk/assemblyscript/README.md guest-sdk/assemblyscript/package.json guest-sdk/assemblyscript/asconfig.json
//go:embed guest-sdk/assemblyscript/index.ts guest-sdk/assemblyscript/exports.ts
//go:embed guest-sdk/assemblyscript/assembly/*.ts guest-sdk/assemblyscript/lib/*.ts
var SDKs embed.FS
