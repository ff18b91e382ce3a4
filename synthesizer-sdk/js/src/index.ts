// enoki's TypeScript/JavaScript SDK: typed ResourceList, helpers to build resources and set
// enoki annotations, and `run(synthesize)` which reads stdin and writes stdout through WASI
// 0.2 streams. Bundle with esbuild (`wasi:*` external) and build the component with
// componentize-js against synthesizer-sdk/wit (see samples/10-typescript). Contract:
// synthesizer-sdk/CONTRACT.md.
/// <reference path="./wasi.d.ts" />
import { getStdin } from "wasi:cli/stdin@0.2.12";
import { getStdout } from "wasi:cli/stdout@0.2.12";

export const INPUT_KEY = "enoki.dev/input-key";
export const OBSERVED = "enoki.dev/observed";

export interface ObjectMeta {
  name: string;
  namespace?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  [field: string]: unknown;
}

/** A Kubernetes object as JSON. */
export interface KubeObject {
  apiVersion: string;
  kind: string;
  metadata: ObjectMeta;
  [field: string]: unknown;
}

export interface Result {
  severity: "error" | "warning" | "info";
  message: string;
  resourceRef?: { apiVersion?: string; kind: string; name: string; namespace?: string };
}

export interface FunctionConfig {
  composition: { name: string; namespace: string; labels?: Record<string, string>; annotations?: Record<string, string>; generation?: number };
  env?: Record<string, string>;
  [field: string]: unknown;
}

/** What stdin carries. */
export interface ResourceListDoc {
  apiVersion: "config.kubernetes.io/v1";
  kind: "ResourceList";
  items: KubeObject[];
  functionConfig?: FunctionConfig;
  results?: Result[];
}

/** Thrown by a synthesizer to fail the synthesis with a message (an `error` result). */
export class SynthesisError extends Error {}

/** The input ResourceList with lookups by input key. */
export class ResourceList {
  readonly items: KubeObject[];
  readonly functionConfig: FunctionConfig;

  constructor(doc: ResourceListDoc) {
    if (!doc || doc.kind !== "ResourceList") throw new SynthesisError("stdin is not a ResourceList");
    this.items = doc.items ?? [];
    this.functionConfig = doc.functionConfig ?? { composition: { name: "", namespace: "" } };
  }

  /** Every item bound under `key` (several for a collection), observed outputs excluded. */
  inputs(key: string): KubeObject[] {
    return this.items.filter((i) => i.metadata?.annotations?.[INPUT_KEY] === key && i.metadata?.annotations?.[OBSERVED] !== "true");
  }

  /** The one item bound under `key`; a missing required input throws SynthesisError. */
  input(key: string): KubeObject;
  input(key: string, optional: true): KubeObject | undefined;
  input(key: string, optional = false): KubeObject | undefined {
    const found = this.inputs(key)[0];
    if (!found && !optional) throw new SynthesisError(`input "${key}" is missing from the ResourceList`);
    return found;
  }

  /** The live state of what the previous synthesis emitted. */
  observed(): KubeObject[] {
    return this.items.filter((i) => i.metadata?.annotations?.[OBSERVED] === "true");
  }

  get composition(): FunctionConfig["composition"] {
    return this.functionConfig.composition;
  }

  get env(): Record<string, string> {
    return this.functionConfig.env ?? {};
  }
}

/** A resource skeleton; `fields` become top-level fields (`spec`, `data`, …). */
export function resource(apiVersion: string, kind: string, name: string, fields: Record<string, unknown> = {}): KubeObject {
  return { apiVersion, kind, metadata: { name }, ...fields };
}

export function annotate<T extends KubeObject>(o: T, key: string, value: string): T {
  o.metadata.annotations = { ...(o.metadata.annotations ?? {}), [key]: value };
  return o;
}

export function label<T extends KubeObject>(o: T, key: string, value: string): T {
  o.metadata.labels = { ...(o.metadata.labels ?? {}), [key]: value };
  return o;
}

/** `enoki.dev/readiness-group`: lower groups are applied (and Ready) first. */
export function readinessGroup<T extends KubeObject>(o: T, group: number): T {
  return annotate(o, "enoki.dev/readiness-group", String(Math.trunc(group)));
}

/** A CEL readiness check over `self` (`enoki.dev/readiness`, or `readiness-<name>`). */
export function readiness<T extends KubeObject>(o: T, cel: string, name?: string): T {
  return annotate(o, "enoki.dev/readiness" + (name ? `-${name}` : ""), cel);
}

export type Synthesize = (rl: ResourceList) => KubeObject[] | { items: KubeObject[]; results?: Result[] };

/** Runs `synthesize` over a document and returns the output ResourceList (pure: testable
 * under Node without WASI). A SynthesisError becomes an `error` result. */
export function render(synthesize: Synthesize, doc: ResourceListDoc): ResourceListDoc {
  let items: KubeObject[] = [];
  let results: Result[] = [];
  try {
    const out = synthesize(new ResourceList(doc));
    if (Array.isArray(out)) items = out;
    else ({ items, results = [] } = out);
  } catch (e) {
    if (!(e instanceof SynthesisError)) throw e;
    results = [{ severity: "error", message: e.message }];
  }
  return { apiVersion: "config.kubernetes.io/v1", kind: "ResourceList", items, results };
}

function readStdin(): string {
  const stdin = getStdin();
  const chunks: Uint8Array[] = [];
  let total = 0;
  for (;;) {
    let chunk: Uint8Array;
    try {
      chunk = stdin.blockingRead(65536n);
    } catch (e) {
      // componentize-js wraps WIT errors: `{ payload: { tag: "closed" } }` at end of input.
      const err = e as { payload?: { tag?: string }; tag?: string };
      if ((err.payload ?? err).tag === "closed") break;
      throw e;
    }
    chunks.push(chunk);
    total += chunk.length;
  }
  const all = new Uint8Array(total);
  let at = 0;
  for (const c of chunks) {
    all.set(c, at);
    at += c.length;
  }
  return new TextDecoder().decode(all);
}

function writeStdout(text: string): void {
  const stdout = getStdout();
  const bytes = new TextEncoder().encode(text);
  // blocking-write-and-flush takes at most 4096 bytes per call.
  for (let i = 0; i < bytes.length; i += 4096) stdout.blockingWriteAndFlush(bytes.subarray(i, i + 4096));
}

/** The `wasi:cli/run` export: `export const run = { run: () => main(synthesize) }`. */
export function main(synthesize: Synthesize): void {
  writeStdout(JSON.stringify(render(synthesize, JSON.parse(readStdin()) as ResourceListDoc)));
}
