// {{name}}: an enoki synthesizer in AssemblyScript (a WASI preview1 module via
// @assemblyscript/wasi-shim; the top-level code is its `_start`). Reads
// config.data.greeting (default "hello") and emits <composition>-greeting.
import {
  JSON, fail, getString, label, obj, readResourceList, readiness, readinessGroup, resource,
  writeResourceList,
} from "enoki-sdk-assemblyscript/assembly";

function main(): void {
  const rl = readResourceList();
  const cfg = rl.input("config");
  if (cfg == null) {
    fail("input \"config\" is missing from the ResourceList");
    return;
  }
  const g = getString(cfg, "data.greeting");
  const greeting = g == null ? "hello" : g;
  const name = rl.compositionName();
  const cm = resource("v1", "ConfigMap", name + "-greeting");
  label(cm, "app.kubernetes.io/name", name);
  readinessGroup(cm, 0);
  readiness(cm, "has(self.data.message)");
  obj(cm, "data").set("message", greeting + ", world");
  writeResourceList([cm]);
}

main();
