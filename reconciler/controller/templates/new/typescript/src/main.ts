// {{name}}: an enoki synthesizer in TypeScript, built into a wasi:cli/command component by
// componentize-js (build.mjs). Reads config.data.greeting (default "hello") and emits
// <composition>-greeting. `synthesize` is pure: import it and test it under Node too.
import { KubeObject, ResourceList, label, main, readiness, readinessGroup, resource } from "@enoki/sdk";

export function synthesize(rl: ResourceList): KubeObject[] {
  const cfg = rl.input("config");
  const data = (cfg.data ?? {}) as Record<string, string>;
  const greeting = data.greeting ?? "hello";
  const name = rl.composition.name;
  const cm = resource("v1", "ConfigMap", `${name}-greeting`, { data: { message: `${greeting}, world` } });
  label(cm, "app.kubernetes.io/name", name);
  readinessGroup(cm, 0);
  readiness(cm, "has(self.data.message)");
  return [cm];
}

export const run = { run: () => main(synthesize) };
