// Sample 08: per-environment settings for a team, in AssemblyScript. From the ConfigMap bound
// under `config` (data.team, data.environments = "dev,staging,…", data.logLevel) it emits, per
// environment, a ConfigMap of settings (readiness group 0) and a ServiceAccount (group 1).
// A ~40 KB WASI preview1 module: the top-level code below is its `_start`.
import {
  JSON, Result, fail, getString, label, obj, readResourceList, readiness, readinessGroup,
  resource, writeResourceList,
} from "enoki-sdk-assemblyscript/assembly";

function main(): void {
  const rl = readResourceList();
  const cfg = rl.input("config");
  if (cfg == null) {
    fail("input \"config\" is missing from the ResourceList");
    return;
  }
  const team = getString(cfg, "data.team");
  if (team == null || team.length == 0) {
    fail("ConfigMap data.team is required");
    return;
  }
  const envList = getString(cfg, "data.environments");
  const envs = (envList == null ? "dev" : envList).split(",");
  const logLevel = getString(cfg, "data.logLevel");
  const items: JSON.Obj[] = [];
  for (let i = 0; i < envs.length; i++) {
    const env = envs[i].trim();
    if (env.length == 0) continue;
    const name = team + "-" + env;
    const settings = resource("v1", "ConfigMap", name + "-settings");
    const data = obj(settings, "data");
    data.set("team", team);
    data.set("environment", env);
    data.set("logLevel", logLevel == null ? (env == "prod" ? "warn" : "debug") : logLevel);
    label(settings, "enoki.dev/team", team);
    readinessGroup(settings, 0);
    readiness(settings, "has(self.data.environment)");
    items.push(settings);

    const sa = resource("v1", "ServiceAccount", name);
    label(sa, "enoki.dev/team", team);
    readinessGroup(sa, 1);
    items.push(sa);
  }
  writeResourceList(items, [new Result("info", "team " + team + ": " + (items.length / 2).toString() + " environments")]);
}

main();
