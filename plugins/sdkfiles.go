package plugins

import (
	"embed"
	"io/fs"
)

// The guest SDKs' sources that 'retryhost plugin new' copies into a
// project: the C headers, the AssemblyScript SDK with its pinned compiler
// (package.json and lockfile), the Rust crate, and the AssemblyScript and
// Rust examples that a new project starts from.
//
//go:embed c/retryhost.h c/attempt.h
//go:embed sdk/assemblyscript/assembly sdk/assemblyscript/package.json sdk/assemblyscript/package-lock.json
//go:embed sdk/assemblyscript/examples/condition/index.ts sdk/assemblyscript/examples/transform/index.ts
//go:embed sdk/rust/src sdk/rust/Cargo.toml
//go:embed sdk/rust/examples/condition/main.rs sdk/rust/examples/transform/main.rs
var sdkFiles embed.FS

// SDKFiles returns the sources of the guest SDKs other than Go's (whose
// projects depend on this module instead), by their paths under plugins/:
// "c/retryhost.h", "sdk/assemblyscript/assembly/index.ts",
// "sdk/rust/src/lib.rs", …. The files are those this build was made from,
// so a project made from them speaks the ABI this build's host speaks.
func SDKFiles() fs.FS { return sdkFiles }
