// enoki ui: the fleet and one Composition, kept live from /api/watch (server-sent events).
// Every text from the cluster goes in with textContent: nothing is parsed as HTML.
"use strict";

const STATES = ["failed", "waiting", "deleting", "suspended", "ready"];
const filters = { namespace: "", synthesizer: "", state: "", text: "" };
let refreshTimer = null;
let fleetData = null; // the fleet last loaded (filters redraw from it)
let running = false; // one refresh at a time; `again` asks for one more after it
let again = false;
let inFlight = null; // the AbortController of the request under way
let focusPending = false; // move focus to the new view once it is drawn
const PLURAL = { Composition: "Compositions", Synthesizer: "Synthesizers", Symphony: "Symphonies",
  ResourceSlice: "ResourceSlices" };
const TIMEOUT_MS = 15000;

// The token: this origin's localStorage (the origin includes the port: no other local server
// can read it; a new tab of a Composition link has it too), replaced by the printed address's
// once the server accepts that one (a page elsewhere cannot wipe it with a made-up one). Sent
// in a header, never a cookie.
let token = localStorage.getItem("enoki-token") || "";
async function adoptToken() {
  const given = new URLSearchParams(location.search).get("token");
  if (!given || given === token) return;
  const resp = await fetch("/api/ping", { headers: { "X-Enoki-Token": given }, credentials: "omit" });
  if (resp.ok) {
    localStorage.setItem("enoki-token", given);
    token = given;
  }
}

// el("tag", {attr: value}, child, …): an element; strings become text nodes.
function el(tag, attrs, ...children) {
  const svg = ["svg", "g", "rect", "text", "path", "title", "defs", "marker"].includes(tag);
  const node = svg ? document.createElementNS("http://www.w3.org/2000/svg", tag)
                   : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== undefined && v !== null && v !== false) node.setAttribute(k, String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    node.append(typeof c === "string" || typeof c === "number" ? String(c) : c);
  }
  return node;
}

function stateBadge(state) {
  return el("span", { class: `state state-${state}` }, state);
}

function ago(rfc3339) {
  if (!rfc3339) return "";
  const s = Math.max(0, Math.round((Date.now() - Date.parse(rfc3339)) / 1000));
  if (s < 120) return `${s}s`;
  if (s < 7200) return `${Math.floor(s / 60)}m`;
  if (s < 172800) return `${Math.floor(s / 3600)}h`;
  return `${Math.floor(s / 86400)}d`;
}

// A GET of the API with the token, its status and body; aborted by a route change or after
// TIMEOUT_MS (the body included). `timedOut` says which.
let timedOut = false;
async function request(path) {
  const controller = new AbortController();
  inFlight = controller;
  timedOut = false;
  const timer = setTimeout(() => { timedOut = true; controller.abort(); }, TIMEOUT_MS);
  try {
    const resp = await fetch(path, { headers: { "X-Enoki-Token": token }, credentials: "omit",
      signal: controller.signal });
    return { ok: resp.ok, status: resp.status, body: await resp.text() };
  } finally {
    clearTimeout(timer);
  }
}

async function getJSON(path) {
  const resp = await request(path);
  if (!resp.ok) throw new Error(resp.body.trim() || `${resp.status}`);
  return JSON.parse(resp.body);
}

function route() {
  const m = location.hash.match(/^#\/c\/([^/]+)\/([^/]+)$/);
  try {
    return m ? { namespace: decodeURIComponent(m[1]), name: decodeURIComponent(m[2]) } : null;
  } catch (e) {
    return null; // a malformed address shows the fleet
  }
}

// Rewritten only when the text changes: the box is an alert, read out on each change.
function showWarnings(list) {
  const box = document.getElementById("warnings");
  if (box.dataset.text === list.join("\n")) return;
  box.dataset.text = list.join("\n");
  box.replaceChildren(...list.map((w) => el("p", { class: "warn" }, w)));
}

// Redraws `main` with `nodes`, keeping the focused control (by its data-focus key) and the
// scroll of the DAG.
function redraw(nodes) {
  const main = document.getElementById("main");
  const focused = document.activeElement && document.activeElement.dataset
    ? document.activeElement.dataset.focus : null;
  const dagBox = main.querySelector(".dag");
  const scroll = dagBox ? [dagBox.scrollLeft, dagBox.scrollTop] : null;
  main.replaceChildren(...nodes.filter((n) => n));
  if (focused) {
    const again = main.querySelector(`[data-focus="${CSS.escape(focused)}"]`);
    if (again) again.focus();
  }
  const dagNew = main.querySelector(".dag");
  if (dagNew && scroll) [dagNew.scrollLeft, dagNew.scrollTop] = scroll;
}

// ---- the fleet ----

// A filter: built once, its options updated in place (an open list stays open); a change
// redraws from the fleet already loaded.
function select(label, key) {
  const s = el("select", { "aria-label": label, "data-focus": `filter:${key}`, "data-key": key },
    el("option", { value: "" }, `all ${label}s`));
  s.addEventListener("change", () => { filters[key] = s.value; if (fleetData) renderFleet(fleetData); });
  return el("label", {}, `${label}:`, s);
}

function setOptions(select, values) {
  const wanted = values.join("\n");
  if (select.dataset.options === wanted) return;
  select.dataset.options = wanted;
  const first = select.options[0];
  select.replaceChildren(first, ...values.map((v) => el("option", { value: v }, v)));
  select.value = values.includes(filters[select.dataset.key]) ? filters[select.dataset.key] : "";
  filters[select.dataset.key] = select.value;
}

// The fleet view's frame: its filters are made once and kept across redraws.
function fleetFrame() {
  const main = document.getElementById("main");
  let frame = main.querySelector("#fleet");
  if (frame) return frame;
  const search = el("input", { type: "search", placeholder: "name", "aria-label": "Filter by name",
    "data-focus": "filter:text" });
  search.value = filters.text;
  search.addEventListener("input", () => { filters.text = search.value; if (fleetData) renderFleet(fleetData); });
  frame = el("div", { id: "fleet" },
    el("p", { class: "muted", role: "status", id: "listing" }),
    el("h2", { id: "comp-title" }),
    el("ul", { class: "counts", id: "counts", "aria-label": "Compositions per state" }),
    el("div", { class: "filters" },
      select("namespace", "namespace"), select("synthesizer", "synthesizer"),
      select("state", "state"), el("label", {}, "name:", search)),
    el("div", { id: "tables" }));
  main.replaceChildren(frame);
  return frame;
}

function matches(c) {
  const t = filters.text.toLowerCase();
  return (!filters.namespace || c.namespace === filters.namespace)
    && (!filters.synthesizer || c.synthesizer === filters.synthesizer)
    && (!filters.state || c.state === filters.state)
    && (!t || `${c.namespace}/${c.name}`.toLowerCase().includes(t));
}

function compositionRow(c) {
  const href = `#/c/${encodeURIComponent(c.namespace)}/${encodeURIComponent(c.name)}`;
  return el("tr", { "data-composition": `${c.namespace}/${c.name}`, "data-state": c.state },
    el("td", {}, c.namespace),
    el("td", {}, el("a", { href, "data-focus": `c:${c.namespace}/${c.name}` }, c.name)),
    el("td", {}, c.synthesizer),
    el("td", {}, stateBadge(c.state), c.stuck ? el("span", { class: "stuck" }, " stuck") : null),
    el("td", { class: "muted" }, c.status),
    el("td", {}, ago(c.since)),
    el("td", {}, c.message));
}

function table(caption, head, rows) {
  return el("table", {},
    el("caption", { class: "muted", style: null }, caption),
    el("thead", {}, el("tr", {}, head.map((h) => el("th", { scope: "col" }, h)))),
    el("tbody", {}, rows));
}

function renderFleet(data) {
  const f = data.fleet;
  const comps = f.compositions;
  const shown = comps.filter(matches);
  const uniq = (xs) => [...new Set(xs)].sort();
  const frame = fleetFrame();
  frame.querySelector("#listing").textContent = data.listing ? "listing… (the first list is not in yet)" : "";
  frame.querySelector("#comp-title").textContent = `Compositions (${comps.length})`;
  frame.querySelector("#counts").replaceChildren(
    ...STATES.map((s) => el("li", { "data-count": s }, stateBadge(s), ` ${f.counts[s] || 0}`)));
  const selects = frame.querySelectorAll("select");
  setOptions(selects[0], uniq(comps.map((c) => c.namespace)));
  setOptions(selects[1], uniq(comps.map((c) => c.synthesizer)));
  setOptions(selects[2], STATES);
  const tables = frame.querySelector("#tables");
  const focused = document.activeElement && tables.contains(document.activeElement)
    ? document.activeElement.dataset.focus : null;
  tables.replaceChildren(
    table(`${shown.length} shown, stuck first`,
      ["Namespace", "Name", "Synthesizer", "State", "Status", "Since", "Message"],
      shown.map(compositionRow)),
    el("h2", {}, `Synthesizers (${f.synthesizers.length})`),
    table("generation reached by the Compositions that use each",
      ["Name", "Generation", "Rollout", "Updated", "Ready", "Module"],
      f.synthesizers.map((s) => el("tr", { "data-synthesizer": s.name },
        el("td", {}, s.name), el("td", {}, s.generation), el("td", {}, s.rollout),
        el("td", {}, `${s.updated} of ${s.compositions}`),
        el("td", {}, s.ready, s.message ? el("span", { class: "muted" }, ` ${s.message}`) : null),
        el("td", { class: "muted" }, s.moduleDigest.slice(0, 19))))),
    el("h2", {}, `Symphonies (${f.symphonies.length})`),
    table("", ["Namespace", "Name", "Variations", "Ready"],
      f.symphonies.map((s) => el("tr", { "data-symphony": `${s.namespace}/${s.name}` },
        el("td", {}, s.namespace), el("td", {}, s.name), el("td", {}, s.variations),
        el("td", {}, stateBadge(s.ready ? "ready" : "waiting"))))));
  if (focused) {
    const again = tables.querySelector(`[data-focus="${CSS.escape(focused)}"]`);
    if (again) again.focus();
  }
  if (!data.listing && !window.enokiFirstRender) {
    window.enokiFirstRender = { ms: performance.now(), rows: shown.length };
  }
}

// ---- one Composition ----

const COL = 260, ROW = 52, W = 220, H = 40, TOP = 16;

// An edge from box a to box b: a curve to the next column; across columns, along the gap
// under the boxes in between (`lane`), so it never runs through one.
function edgePath(a, b, lane) {
  const [x1, y1, x2, y2] = [a.x + W, a.y + H / 2, b.x, b.y + H / 2];
  if (b.x - a.x <= COL) {
    const m = (x1 + x2) / 2;
    return `M${x1},${y1} C${m},${y1} ${m},${y2} ${x2},${y2}`;
  }
  return `M${x1},${y1} H${x1 + 12} V${lane} H${x2 - 12} V${y2} H${x2}`;
}

function dag(graph) {
  const pos = {};
  const perColumn = {};
  const order = { dependency: 0, group: 1, resource: 2 };
  const nodes = [...graph.nodes].sort((a, b) => order[a.role] - order[b.role]);
  for (const n of nodes) {
    const row = perColumn[n.column] || 0;
    perColumn[n.column] = row + 1;
    pos[n.id] = { x: 16 + n.column * COL, y: TOP + row * ROW + (n.role === "resource" ? 12 : 0) };
  }
  const rows = Math.max(1, ...Object.values(perColumn));
  const cols = Math.max(1, ...nodes.map((n) => n.column + 1));
  const lane = TOP + rows * ROW + 14;
  const edges = graph.edges.filter((e) => pos[e.from] && pos[e.to]).map((e, i) =>
    el("path", { class: `edge ${e.kind}`, "data-from": e.from, "data-to": e.to,
      "data-kind": e.kind, "marker-end": "url(#arrow)",
      d: edgePath(pos[e.from], pos[e.to], lane + (i % 4) * 4) }));
  const boxes = nodes.map((n) => {
    const p = pos[n.id];
    const label = n.label.length > 30 ? `${n.label.slice(0, 29)}…` : n.label;
    return el("g", { class: `node ${n.role} state-${n.state}`, "data-id": n.id,
      "data-label": n.label, "data-state": n.state, transform: `translate(${p.x},${p.y})` },
      el("title", {}, `${n.label}: ${n.detail}`),
      el("rect", { width: W, height: H, rx: 6 }),
      el("text", { x: 8, y: 16 }, label),
      el("text", { x: 8, y: 32, class: `state state-${n.state}` }, n.state));
  });
  const width = 32 + cols * COL, height = lane + 28;
  return el("div", { class: "dag" },
    el("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img",
      "aria-label": "Readiness-group DAG: the table below lists the same resources" },
      el("defs", {}, el("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5,
        markerWidth: 6, markerHeight: 6, orient: "auto-start-reverse" },
        el("path", { d: "M0,0 L10,5 L0,10 z", class: "edge" }))),
      edges, boxes));
}

function kv(pairs) {
  return el("dl", { class: "kv" },
    pairs.filter(([, v]) => v !== "" && v !== null && v !== undefined)
      .flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, String(v))]));
}

function renderDetail(d) {
  const v = d.view;
  const s = d.synthesis;
  redraw([
    el("p", {}, el("a", { href: "#/", "data-focus": "back" }, "← fleet")),
    el("h2", { id: "title" }, `Composition ${v.namespace}/${v.name}`),
    kv([["synthesizer", v.synthesizer], ["ready", v.ready ? "yes" : "no"],
      ["next synthesis", `${v.next.state}${v.next.reason ? ` (${v.next.reason})` : ""}`],
      ["", v.next.message || ""]]),
    el("h2", {}, "Readiness groups"),
    v.note ? el("p", { class: "warn" }, v.note) : dag(d.graph),
    table("each resource of the current synthesis, in apply order",
      ["Group", "Resource", "State", "Why"],
      v.resources.map((r) => el("tr", { "data-resource": r.namespace ? `${r.kind} ${r.namespace}/${r.name}` : `${r.kind} ${r.name}`, "data-state": r.state },
        el("td", {}, r.group),
        el("td", {}, r.namespace ? `${r.kind} ${r.namespace}/${r.name}` : `${r.kind} ${r.name}`),
        el("td", {}, stateBadge(r.state)),
        el("td", {}, why(r))))),
    el("h2", {}, "Conditions"),
    table("", ["Type", "Status", "Reason", "Message"],
      v.conditions.map((c) => el("tr", {}, el("td", {}, c.type), el("td", {}, c.status),
        el("td", {}, c.reason), el("td", {}, c.message)))),
    el("h2", {}, "Inputs"),
    table("", ["Key", "Kind", "Object", "resourceVersion", "Revision"],
      d.inputs.map((i) => el("tr", { "data-input": i.key }, el("td", {}, i.key),
        el("td", {}, i.kind), el("td", {}, `${i.namespace}/${i.name}`),
        el("td", {}, i.resourceVersion), el("td", {}, i.revision ?? "")))),
    el("h2", {}, "Synthesis"),
    s ? kv([["uuid", s.uuid], ["synthesized", s.synthesized], ["reconciled", s.reconciled],
      ["ready", s.ready], ["attempts", s.attempts], ["module", s.moduleDigest],
      ["synthesizer generation", s.synthesizerGeneration ?? ""],
      ["results", s.results.join("\n")]]) : el("p", { class: "muted" }, "none yet"),
    d.inFlight ? el("p", {}, `in flight: ${d.inFlight.uuid} (attempt ${d.inFlight.attempts})`) : null,
    el("h2", {}, "Recent Events"),
    d.eventsNote ? el("p", { class: "warn" }, d.eventsNote) : null,
    table("", ["Last seen", "Type", "Reason", "Count", "Message"],
      d.events.map((e) => el("tr", {}, el("td", {}, ago(e.lastSeen)), el("td", {}, e.type),
        el("td", {}, e.reason), el("td", {}, e.count), el("td", {}, e.message))))]);
}

function why(r) {
  if (r.state === "waiting") return `waiting on ${(r.unsatisfied || []).join("; ")}`;
  if (r.state === "failed" || r.state === "unreadable") return r.reason || "";
  if (r.state === "deferred") return `after group ${r.waitsOn}`;
  return "";
}

// ---- loading and live updates ----

async function refresh() {
  if (running) { again = true; return; }
  running = true;
  try {
    do { again = false; await refreshOnce(); } while (again);
  } finally {
    running = false;
  }
}

// Moves focus to the new view once, unless the user has moved it since.
function settleFocus() {
  if (!focusPending) return;
  focusPending = false;
  document.getElementById("main").focus();
}

// A Composition's page that could not be drawn: the way back and why.
function drawProblem(text) {
  redraw([el("p", {}, el("a", { href: "#/", "data-focus": "back" }, "← fleet")),
    el("p", { class: "warn" }, text)]);
}

async function refreshOnce() {
  const target = route();
  const moved = () => JSON.stringify(route()) !== JSON.stringify(target);
  try {
    if (target) {
      const path = `/api/compositions/${encodeURIComponent(target.namespace)}/${encodeURIComponent(target.name)}`;
      const resp = await request(path);
      if (moved()) { again = true; return; }
      if (!resp.ok) {
        drawProblem(resp.body.trim() || `${resp.status}`);
      } else {
        renderDetail(JSON.parse(resp.body));
      }
      showWarnings([]);
    } else {
      const data = await getJSON("/api/fleet");
      if (moved()) { again = true; return; }
      fleetData = data;
      document.getElementById("scope").textContent = data.scope.namespace
        ? `namespace ${data.scope.namespace}` : "all namespaces";
      const warnings = Object.entries(data.errors)
        .map(([k, e]) => `watching ${PLURAL[k] || k}: ${e}`);
      if (data.scope.note) warnings.push(data.scope.note);
      showWarnings(warnings);
      renderFleet(data);
    }
    settleFocus();
  } catch (e) {
    // Aborted by a navigation (even to the same view): the next turn of the loop draws it.
    if (moved() || (e && e.name === "AbortError" && !timedOut)) { again = true; return; }
    const text = timedOut ? "the request timed out" : String(e.message || e);
    if (target) drawProblem(text);
    else showWarnings([text]);
    settleFocus();
  }
}

function soon() {
  if (refreshTimer) return;
  refreshTimer = setTimeout(() => { refreshTimer = null; refresh(); }, 150);
}

function concerns(change) {
  const target = route();
  if (!target || change.kind === "*") return true;
  return change.kind === "Composition" && change.namespace === target.namespace
    && change.name === target.name;
}

function listen() {
  const live = document.getElementById("live");
  const source = new EventSource(`/api/watch?token=${encodeURIComponent(token)}`);
  let failing = null; // when the stream last failed without opening again
  source.addEventListener("open", () => { failing = null; live.textContent = "live"; soon(); });
  source.addEventListener("error", async () => {
    failing = failing || Date.now();
    const gone = source.readyState === EventSource.CLOSED || (Date.now() - failing > 10000
      && !(await fetch("/api/ping", { headers: { "X-Enoki-Token": token },
        signal: AbortSignal.timeout(5000) }).then((r) => r.ok, () => false)));
    // The stream may have opened again meanwhile: "live" stands.
    if (failing === null || source.readyState === EventSource.OPEN) return;
    live.textContent = gone ? "disconnected: open the address `enoki ui` printed" : "reconnecting…";
  });
  source.addEventListener("resync", soon);
  source.addEventListener("change", (e) => { if (concerns(JSON.parse(e.data))) soon(); });
}

function theme() {
  const button = document.getElementById("theme");
  const apply = (t) => {
    if (t === "auto") delete document.documentElement.dataset.theme;
    else document.documentElement.dataset.theme = t;
    button.textContent = `Theme: ${t}`;
  };
  let current = localStorage.getItem("enoki-theme") || "auto";
  apply(current);
  button.addEventListener("click", () => {
    current = { auto: "light", light: "dark", dark: "auto" }[current];
    localStorage.setItem("enoki-theme", current);
    apply(current);
  });
}

theme();
adoptToken().catch(() => {}).then(() => {
  if (location.search) history.replaceState(null, "", `/${location.hash}`);
  if (!token) showWarnings(["open the address `enoki ui` printed: it carries the token"]);
  refresh();
  listen();
});
// The skip link moves focus; it does not change the route.
document.querySelector(".skip").addEventListener("click", (e) => {
  e.preventDefault();
  document.getElementById("main").focus();
});
// Ages ("since", stuck) move on without a change in the cluster.
setInterval(soon, 30000);
window.addEventListener("hashchange", () => {
  if (inFlight) inFlight.abort(); // the answer for the old view is not needed
  document.getElementById("main").replaceChildren(el("p", { class: "muted" }, "loading…"));
  focusPending = true;
  refresh();
});
// The user moved focus: the new view does not take it away.
document.addEventListener("focusin", (e) => {
  if (e.target !== document.getElementById("main")) focusPending = false;
});
