// enoki's AssemblyScript SDK: read the ResourceList from stdin, build resources as JSON
// objects, write the output ResourceList to stdout. Compile with
// `asc … --config node_modules/@assemblyscript/wasi-shim/asconfig.json` (a WASI preview1
// command module whose top-level code is `_start`). Parsing is assemblyscript-json's; writing
// is `stringify` below, because that library's encoder escapes control characters as a
// backslash followed by the raw character, which is not JSON. Contract:
// synthesizer-sdk/CONTRACT.md.
import { JSON } from "assemblyscript-json/assembly";

export { JSON };

export const INPUT_KEY = "enoki.dev/input-key";
export const OBSERVED = "enoki.dev/observed";

/** Reads all of stdin (WASI fd 0) as UTF-8. */
export function readStdin(): string {
  const chunks: ArrayBuffer[] = [];
  let total = 0;
  while (true) {
    const buf = new ArrayBuffer(65536);
    const n = process.stdin.read(buf);
    if (n <= 0) break;
    chunks.push(buf.slice(0, n));
    total += n;
  }
  const all = new Uint8Array(total);
  let at = 0;
  for (let i = 0; i < chunks.length; i++) {
    all.set(Uint8Array.wrap(chunks[i]), at);
    at += chunks[i].byteLength;
  }
  return String.UTF8.decode(all.buffer);
}

/** A string at a dotted path (`metadata.name`, `data.greeting`), or null. */
export function getString(o: JSON.Obj, path: string): string | null {
  const parts = path.split(".");
  let cur: JSON.Obj = o;
  for (let i = 0; i < parts.length - 1; i++) {
    const next = cur.getObj(parts[i]);
    if (next == null) return null;
    cur = next;
  }
  const s = cur.getString(parts[parts.length - 1]);
  return s == null ? null : s.valueOf();
}

/** An annotation's value (annotation keys contain dots, so not a `getString` path). */
export function annotation(o: JSON.Obj, key: string): string | null {
  const meta = o.getObj("metadata");
  if (meta == null) return null;
  const annotations = meta.getObj("annotations");
  if (annotations == null) return null;
  const v = annotations.getString(key);
  return v == null ? null : v.valueOf();
}

/** The input ResourceList: bound inputs, observed outputs, functionConfig. */
export class ResourceList {
  items: JSON.Obj[] = [];
  functionConfig: JSON.Obj = new JSON.Obj();

  static parse(text: string): ResourceList {
    const rl = new ResourceList();
    const doc = JSON.parse(text);
    if (!doc.isObj) return rl;
    const obj = <JSON.Obj>doc;
    const items = obj.getArr("items");
    if (items != null) {
      const values = items.valueOf();
      for (let i = 0; i < values.length; i++) {
        if (values[i].isObj) rl.items.push(<JSON.Obj>values[i]);
      }
    }
    const fc = obj.getObj("functionConfig");
    if (fc != null) rl.functionConfig = fc;
    return rl;
  }

  /** Every item bound under `key` (several for a collection), observed outputs excluded. */
  inputs(key: string): JSON.Obj[] {
    const out: JSON.Obj[] = [];
    for (let i = 0; i < this.items.length; i++) {
      const item = this.items[i];
      const k = annotation(item, INPUT_KEY);
      const observed = annotation(item, OBSERVED);
      if (k != null && k == key && (observed == null || observed != "true")) out.push(item);
    }
    return out;
  }

  /** The one item bound under `key`, or null when it is absent (optional inputs). */
  input(key: string): JSON.Obj | null {
    const found = this.inputs(key);
    return found.length > 0 ? found[0] : null;
  }

  compositionName(): string {
    const n = getString(this.functionConfig, "composition.name");
    return n == null ? "" : n;
  }

  compositionNamespace(): string {
    const n = getString(this.functionConfig, "composition.namespace");
    return n == null ? "" : n;
  }
}

/** Reads and parses stdin. */
export function readResourceList(): ResourceList {
  return ResourceList.parse(readStdin());
}

function child(o: JSON.Obj, key: string): JSON.Obj {
  let c = o.getObj(key);
  if (c == null) {
    c = new JSON.Obj();
    o.set(key, c);
  }
  return c;
}

/** A resource skeleton: apiVersion, kind, metadata.name. */
export function resource(apiVersion: string, kind: string, name: string): JSON.Obj {
  const o = new JSON.Obj();
  o.set("apiVersion", apiVersion);
  o.set("kind", kind);
  child(o, "metadata").set("name", name);
  return o;
}

/** The object at `key`, created empty when missing (`obj(cm, "data").set("k", "v")`). */
export function obj(o: JSON.Obj, key: string): JSON.Obj {
  return child(o, key);
}

export function annotate(o: JSON.Obj, key: string, value: string): JSON.Obj {
  child(child(o, "metadata"), "annotations").set(key, value);
  return o;
}

export function label(o: JSON.Obj, key: string, value: string): JSON.Obj {
  child(child(o, "metadata"), "labels").set(key, value);
  return o;
}

/** `enoki.dev/readiness-group`: lower groups are applied (and Ready) first. */
export function readinessGroup(o: JSON.Obj, group: i32): JSON.Obj {
  return annotate(o, "enoki.dev/readiness-group", group.toString());
}

/** A CEL readiness check over `self` (`enoki.dev/readiness`). */
export function readiness(o: JSON.Obj, cel: string): JSON.Obj {
  return annotate(o, "enoki.dev/readiness", cel);
}

/** A `results[]` entry (`error` fails the synthesis with the message). */
export class Result {
  constructor(public severity: string, public message: string) {}
}

function quote(s: string): string {
  let out = "\"";
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c == 0x22) out += "\\\"";
    else if (c == 0x5c) out += "\\\\";
    else if (c == 0x0a) out += "\\n";
    else if (c == 0x0d) out += "\\r";
    else if (c == 0x09) out += "\\t";
    else if (c < 0x20) out += "\\u" + c.toString(16).padStart(4, "0");
    else out += String.fromCharCode(c);
  }
  return out + "\"";
}

/** JSON text of a value (correct escaping; keys in insertion order). */
export function stringify(v: JSON.Value): string {
  if (v.isString) return quote((<JSON.Str>v).valueOf());
  if (v.isObj) {
    const o = <JSON.Obj>v;
    const keys = o.keys;
    const parts: string[] = [];
    for (let i = 0; i < keys.length; i++) {
      parts.push(quote(keys[i]) + ":" + stringify(o.valueOf().get(keys[i])));
    }
    return "{" + parts.join(",") + "}";
  }
  if (v.isArr) {
    const a = (<JSON.Arr>v).valueOf();
    const parts: string[] = [];
    for (let i = 0; i < a.length; i++) parts.push(stringify(a[i]));
    return "[" + parts.join(",") + "]";
  }
  return v.stringify(); // numbers, booleans, null
}

/** Writes the output ResourceList to stdout. */
export function writeResourceList(items: JSON.Obj[], results: Result[] = []): void {
  const list = new JSON.Arr();
  for (let i = 0; i < items.length; i++) list.push(items[i]);
  const res = new JSON.Arr();
  for (let i = 0; i < results.length; i++) {
    const r = new JSON.Obj();
    r.set("severity", results[i].severity);
    r.set("message", results[i].message);
    res.push(r);
  }
  const out = new JSON.Obj();
  out.set("apiVersion", "config.kubernetes.io/v1");
  out.set("kind", "ResourceList");
  out.set("items", list);
  out.set("results", res);
  process.stdout.write(stringify(out));
}

/** Fails the synthesis with `message` (an `error` result; nothing is applied). */
export function fail(message: string): void {
  writeResourceList([], [new Result("error", message)]);
}
