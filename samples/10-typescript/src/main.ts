// Sample 10: a static website — nginx config, Deployment and Service — from one ConfigMap,
// in TypeScript with @enoki/sdk. `synthesize` is pure (tested under Node by `npm test`);
// `run` is the wasi:cli/run export componentize-js wires to the component's entry point.
import { KubeObject, ResourceList, SynthesisError, label, main, readiness, readinessGroup, resource } from "@enoki/sdk";

function int(data: Record<string, string>, key: string, fallback: number): number {
  const raw = data[key];
  if (raw === undefined) return fallback;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 0) throw new SynthesisError(`ConfigMap data.${key}: "${raw}" is not a non-negative integer`);
  return n;
}

export function synthesize(rl: ResourceList): KubeObject[] {
  const cfg = rl.input("config");
  const data = (cfg.data ?? {}) as Record<string, string>;
  const site = data.site ?? cfg.metadata.name;
  const greeting = data.greeting ?? `Welcome to ${site}`;
  const replicas = int(data, "replicas", 1);
  const selector = { "app.kubernetes.io/name": site };

  const content = resource("v1", "ConfigMap", `${site}-content`, {
    data: {
      "index.html": `<!doctype html>\n<title>${site}</title>\n<h1>${greeting}</h1>\n`,
      "default.conf": "server {\n  listen 8080;\n  root /usr/share/nginx/html;\n}\n",
    },
  });
  readinessGroup(content, 0);
  readiness(content, "'index.html' in self.data");

  const deployment = resource("apps/v1", "Deployment", site, {
    spec: {
      replicas,
      selector: { matchLabels: selector },
      template: {
        metadata: { labels: { ...selector } },
        spec: {
          containers: [{
            name: "nginx",
            image: data.image ?? "nginx:1.27-alpine",
            ports: [{ name: "http", containerPort: 8080 }],
            volumeMounts: [
              { name: "content", mountPath: "/usr/share/nginx/html/index.html", subPath: "index.html" },
              { name: "content", mountPath: "/etc/nginx/conf.d/default.conf", subPath: "default.conf" },
            ],
          }],
          volumes: [{ name: "content", configMap: { name: `${site}-content` } }],
        },
      },
    },
  });
  const service = resource("v1", "Service", site, {
    spec: { selector: { ...selector }, ports: [{ name: "http", port: 80, targetPort: "http" }] },
  });
  for (const o of [content, deployment, service]) label(o, "app.kubernetes.io/name", site);
  readinessGroup(deployment, 1);
  readinessGroup(service, 1);
  return [content, deployment, service];
}

export const run = { run: () => main(synthesize) };
