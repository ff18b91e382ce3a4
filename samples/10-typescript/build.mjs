// build.mjs <entry.ts> <out.wasm> <wit dir> — bundle a TypeScript synthesizer with esbuild
// (the `wasi:*` imports stay external) and turn it into a wasi:cli/command component with
// componentize-js, targeting the `synthesizer` world (plain wasi:cli/command). The http and
// fetch-event features are disabled: enoki links no wasi:http, so they would not instantiate.
import { build } from "esbuild";
import { componentize } from "@bytecodealliance/componentize-js";
import { mkdir, writeFile } from "node:fs/promises";
import { dirname } from "node:path";

const [entry, out, wit] = process.argv.slice(2);
if (!entry || !out || !wit) {
  console.error("usage: node build.mjs <entry.ts> <out.wasm> <wit dir>");
  process.exit(2);
}
const bundled = await build({
  entryPoints: [entry],
  bundle: true,
  format: "esm",
  platform: "neutral",
  target: "es2022",
  external: ["wasi:*"],
  write: false,
  logLevel: "warning",
});
await mkdir(dirname(out), { recursive: true });
const js = `${out}.js`;
await writeFile(js, bundled.outputFiles[0].text);
const { component } = await componentize({
  sourcePath: js,
  witPath: wit,
  worldName: "synthesizer",
  disableFeatures: ["http", "fetch-event"],
});
await writeFile(out, component);
console.error(`built ${out} (${component.length} bytes)`);
