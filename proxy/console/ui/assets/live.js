// The live view: recent requests through this proxy (any client), newest first, live over
// GET /thinkproxy/events; opening one shows its timeline. Summaries only: the feed never carries
// reasoning text, prompts, tool payloads or keys.

import { adminHeaders, adminKey, setAdminKey } from "./admin.js";
import { clear, h, role } from "./dom.js";
import { lang, ms, onLangChange, t, usd } from "./i18n.js";
import { readEvents } from "./sse.js";
import { BRIEF_TYPES, toolTitle, traceItem } from "./timeline.js";

const state = {
  entries: new Map(), // id -> summary
  order: [], // ids, newest first
  history: 200,
  shared: false,
  omitted: 0, // older requests the last listing left out for its size (its `omitted`)
  titles: {},
  selected: null,
  mode: "detailed",
  controller: null,
  skipped: 0, // updates the proxy dropped for this page while it was behind (`gap` events)
  resync: null, // the listing being re-read after a gap
};

function setConnection(name, ...args) {
  const el = role("connection");
  el.dataset.state = name;
  el.textContent = t(`conn.${name}`, ...(args.length ? args : [state.skipped]));
}

// The proxy drops updates for a page that reads too slowly and says so with a `gap` event: the
// page shows it and re-reads the whole listing (at most one re-read at a time).
function onGap(data) {
  const dropped = Number.isInteger(data.dropped) ? data.dropped : 0;
  state.skipped += dropped;
  setConnection("gap", state.skipped);
  if (state.resync) return;
  const headers = adminHeaders({ Accept: "application/json" });
  state.resync = fetch("/thinkproxy/requests", { headers, cache: "no-store" })
    .then((response) => (response.ok ? response.json() : null))
    .then((listing) => {
      if (listing) apply("snapshot", listing);
    })
    .catch(() => {})
    .finally(() => {
      state.resync = null;
    });
}

function upsert(entry) {
  if (!entry || typeof entry.id !== "string") return;
  const known = state.entries.get(entry.id);
  // A finished summary is never replaced by a late progress update.
  if (known && !known.in_flight && entry.in_flight) return;
  state.entries.set(entry.id, entry);
  if (!known) {
    state.order.push(entry.id);
    state.order.sort((a, b) => (state.entries.get(b).started_at ?? 0) - (state.entries.get(a).started_at ?? 0));
    while (state.order.length > state.history) state.entries.delete(state.order.pop());
  }
}

function clock(epochMs) {
  const d = new Date(epochMs);
  return [d.getHours(), d.getMinutes(), d.getSeconds()].map((n) => String(n).padStart(2, "0")).join(":");
}

function levelText(entry) {
  if (entry.route !== "chat") return "—";
  const asked = entry.level_requested ?? "—";
  const applied = entry.level ?? "—";
  return asked === applied ? applied : `${asked} → ${applied}`;
}

function toolsText(entry) {
  const tools = entry.tool_calls || [];
  if (!tools.length) return "";
  return tools.map((tool) => toolTitle(tool, state.titles, lang())).join(", ");
}

function statusCell(entry) {
  if (entry.in_flight) return h("span", { class: "badge run" }, t("live.inflight"));
  const ok = entry.status >= 200 && entry.status < 300 && !entry.error;
  return [
    h("span", { class: `badge ${ok ? "ok" : "bad"}` }, String(entry.status ?? ""), entry.error ? ` ${entry.error}` : ""),
    starvedBadge(entry),
  ];
}

// The reasoning used the whole output limit and left no answer (trace warning reasoning_starved).
function starvedBadge(entry) {
  if (!entry.reasoning_starved) return null;
  return h("span", { class: "badge warn", "data-role": "starved", title: t("starved.title") }, t("starved.badge"));
}

function row(entry) {
  const tr = h(
    "tr",
    {
      "data-role": "request",
      "data-id": entry.id,
      "data-status": entry.in_flight ? "in_flight" : String(entry.status),
      class: entry.id === state.selected ? "selected" : null,
      tabindex: "0",
    },
    h("td", { class: "muted" }, clock(entry.started_at)),
    h("td", {}, entry.provider ?? (entry.route === "chat" ? "—" : t("live.passthrough"))),
    h("td", { class: "model" }, entry.route === "chat" ? entry.model ?? "—" : `${entry.method} ${entry.path}`),
    h("td", {}, levelText(entry)),
    h("td", {}, entry.thinking_method ?? "—"),
    h("td", {}, statusCell(entry)),
    h("td", { class: "num" }, ms(entry.ttft_ms)),
    h("td", { class: "num" }, ms(entry.reasoning_ms)),
    h("td", { class: "num" }, ms(entry.total_ms)),
    h("td", { class: "num", "data-role": "cost" }, entry.cost_usd != null ? usd(entry.cost_usd) : ""),
    h("td", { class: "tools" }, toolsText(entry)),
  );
  tr.addEventListener("click", () => select(entry.id));
  tr.addEventListener("keydown", (e) => {
    if (e.key === "Enter") select(entry.id);
  });
  return tr;
}

function renderList() {
  const body = role("requests");
  clear(body);
  for (const id of state.order) body.append(row(state.entries.get(id)));
  role("empty").hidden = state.order.length > 0;
  role("feed-count").textContent = t("live.count", state.order.length, state.shared, state.omitted);
}

function fact(dl, key, value) {
  if (value === null || value === undefined || value === "") return;
  dl.append(h("dt", {}, t(key)), h("dd", {}, value));
}

function renderDetail() {
  const aside = role("detail");
  const entry = state.selected && state.entries.get(state.selected);
  if (!entry) {
    aside.hidden = true;
    return;
  }
  aside.hidden = false;
  role("detail-title").textContent = entry.route === "chat" ? entry.model ?? "—" : `${entry.method} ${entry.path}`;
  for (const button of role("detail-mode").querySelectorAll("button")) {
    button.classList.toggle("on", button.dataset.mode === state.mode);
  }
  const dl = role("detail-facts");
  clear(dl);
  fact(dl, "fact.client", entry.client);
  fact(dl, "fact.provider", entry.provider);
  fact(dl, "fact.model", entry.model);
  if (entry.route === "chat") fact(dl, "fact.level", `${entry.level_requested ?? "—"} → ${entry.level ?? "—"}`);
  fact(dl, "fact.method", entry.thinking_method);
  fact(dl, "fact.status", entry.in_flight ? t("live.inflight") : String(entry.status));
  fact(dl, "fact.error", entry.error);
  fact(dl, "fact.stream", entry.route === "chat" ? String(entry.stream) : null);
  fact(dl, "fact.ttft", entry.ttft_ms !== null && entry.ttft_ms !== undefined ? ms(entry.ttft_ms) : null);
  fact(dl, "fact.thinking", entry.reasoning_ms !== null && entry.reasoning_ms !== undefined ? ms(entry.reasoning_ms) : null);
  fact(dl, "fact.total", entry.total_ms !== null && entry.total_ms !== undefined ? ms(entry.total_ms) : null);
  fact(dl, "fact.finish", entry.finish_reason);
  if (entry.reasoning_starved) fact(dl, "fact.warning", h("span", {}, starvedBadge(entry), " ", t("starved.title")));
  if (entry.usage) fact(dl, "fact.tokens", `${entry.usage.prompt_tokens ?? "—"} / ${entry.usage.completion_tokens ?? "—"}`);
  fact(dl, "fact.cached", entry.usage?.cached_tokens != null ? String(entry.usage.cached_tokens) : null);
  // An estimate (the upstream reported no count) says so: it is the proxy's, not the provider's.
  const reasoning = entry.usage?.reasoning_tokens;
  const estimated = entry.usage?.reasoning_tokens_source === "estimated" ? ` (${t("fact.estimated")})` : "";
  fact(dl, "fact.reasoning_tokens", reasoning != null ? `${reasoning}${estimated}` : null);
  fact(dl, "fact.cost", entry.cost_usd != null ? usd(entry.cost_usd) : null);
  fact(dl, "fact.tools", toolsText(entry));
  if (state.shared) fact(dl, "fact.replica", entry.replica);

  const list = role("timeline");
  clear(list);
  const events = (entry.events || []).filter((e) => state.mode === "detailed" || BRIEF_TYPES.has(e.type));
  for (const event of events) list.append(traceItem(event, { titles: state.titles, language: lang() }));
  if (entry.events_dropped) list.append(h("li", { class: "item muted" }, t("detail.dropped", entry.events_dropped)));
  if (!events.length) list.append(h("li", { class: "item muted" }, t("detail.none")));
}

function select(id) {
  state.selected = id;
  renderList();
  renderDetail();
}

function render() {
  renderList();
  renderDetail();
}

// A busy proxy may finish many requests a second: the page redraws at most once a frame.
let pending = false;
function scheduleRender() {
  if (pending) return;
  pending = true;
  requestAnimationFrame(() => {
    pending = false;
    render();
  });
}

function apply(event, data) {
  if (event === "snapshot") {
    state.entries.clear();
    state.order = [];
    state.history = data.history || state.history;
    state.shared = !!data.shared;
    state.omitted = Number.isInteger(data.omitted) ? data.omitted : 0;
    state.titles = data.tool_titles || {};
    for (const entry of [...(data.data || [])].reverse()) upsert(entry);
  } else if (event === "request" || event === "progress") {
    upsert(data);
  } else if (event === "gap") {
    onGap(data);
  }
  scheduleRender();
}

async function connect() {
  if (state.controller) state.controller.abort();
  const controller = new AbortController();
  state.controller = controller;
  let delay = 1000;
  while (!controller.signal.aborted) {
    setConnection("connecting");
    const headers = adminHeaders({ Accept: "text/event-stream" });
    try {
      const response = await fetch("/thinkproxy/events", { headers, signal: controller.signal, cache: "no-store" });
      if (response.status === 401) {
        askForKey(adminKey() !== null);
        return;
      }
      if (!response.ok) throw new Error(String(response.status));
      role("admin-auth").hidden = true;
      setConnection("live");
      delay = 1000;
      for await (const { event, data } of readEvents(response, controller.signal)) {
        let parsed;
        try {
          parsed = JSON.parse(data);
        } catch (_) {
          continue;
        }
        apply(event, parsed);
      }
    } catch (_) {
      if (controller.signal.aborted) return;
    }
    setConnection("retry");
    await new Promise((resolve) => setTimeout(resolve, delay));
    delay = Math.min(delay * 2, 8000);
  }
}

function askForKey(refused) {
  setConnection("auth");
  const form = role("admin-auth");
  form.hidden = false;
  role("admin-error").textContent = refused ? t("auth.refused") : "";
  role("admin-key").focus();
}

export function initLive() {
  role("admin-auth").addEventListener("submit", (e) => {
    e.preventDefault();
    const input = role("admin-key");
    setAdminKey(input.value.trim());
    input.value = "";
    connect();
  });
  for (const button of role("detail-mode").querySelectorAll("button")) {
    button.addEventListener("click", () => {
      state.mode = button.dataset.mode;
      renderDetail();
    });
  }
  onLangChange(() => {
    render();
    setConnection(role("connection").dataset.state);
  });
  render();
  connect();
}
