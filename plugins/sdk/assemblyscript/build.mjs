// Builds examples/<name>/index.ts to examples/<name>/<name>.wasm for each
// name given, in one Node process (the compiler loads once), with the
// compiler flags after "--":
//
//   node build.mjs condition transform refusal -- --runtime minimal ...
//
// The plugins Makefile runs it (make -C plugins as) with its fixed flags;
// the same sources and flags give the same bytes.
import asc from "assemblyscript/asc";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

process.chdir(dirname(fileURLToPath(import.meta.url))); // paths are this directory's
const sep = process.argv.indexOf("--");
const names = process.argv.slice(2, sep < 0 ? undefined : sep);
const flags = sep < 0 ? [] : process.argv.slice(sep + 1);
for (const name of names) {
  const dir = join("examples", name);
  console.log(`as   ${join("sdk/assemblyscript", dir, name + ".wasm")}`);
  const { error } = await asc.main([join(dir, "index.ts"), "-o", join(dir, name + ".wasm"), ...flags], {
    stdout: process.stdout,
    stderr: process.stderr,
  });
  if (error) {
    console.error(String(error));
    process.exit(1);
  }
}
