// The live view: recent requests through this proxy (any client), newest first, live over
// GET /thinkproxy/events; opening one shows its timeline. Summaries only: the feed never carries
// reasoning text, prompts, tool payloads or keys.

import { adminHeaders, adminKey, onAdminKey, setAdminKey } from "./admin.js";
import { renderChanges } from "./diff.js";
import { clear, h, role } from "./dom.js";
import { clientKindOf, doorText, isModelRequest, modelText, reasoningEstimated, sessionOf, thinkingMs, tokensOf } from "./facts.js";
import { FilterBar, matches } from "./filters.js";
import { lang, ms, onLangChange, t, usd } from "./i18n.js";
import { COLUMNS, droppedBadge, requestRow, sessionRow, starvedBadge, toolsText } from "./live_rows.js";
import { LiveStore } from "./live_store.js";
import { showSession } from "./sessions.js";
import { readEvents } from "./sse.js";
import { BRIEF_TYPES, traceItem } from "./timeline.js";

const state = {
  store: new LiveStore(200),
  shared: false,
  omitted: 0, // older requests the last listing left out for its size (its `omitted`)
  titles: {},
  selected: null,
  expanded: new Set(), // sessions opened in the list
  mode: "detailed",
  controller: null,
  skipped: 0, // updates the proxy dropped for this page while it was behind (`gap` events)
  resync: null, // the listing being re-read after a gap
  filters: null, // FilterBar
};

function setConnection(name, ...args) {
  const el = role("connection");
  el.dataset.state = name;
  el.textContent = t(`conn.${name}`, ...(args.length ? args : [state.skipped]));
}

// The proxy drops updates for a page that reads too slowly and says so with a `gap` event: the
// page shows it and re-reads the whole listing (at most one re-read at a time), merged into what
// it holds (the listing may be a flood's newest rows only: the other sessions' rows stay).
function onGap(data) {
  const dropped = Number.isInteger(data.dropped) ? data.dropped : 0;
  state.skipped += dropped;
  setConnection("gap", state.skipped);
  if (state.resync) return;
  const headers = adminHeaders({ Accept: "application/json" });
  state.resync = fetch("/thinkproxy/requests", { headers, cache: "no-store" })
    .then((response) => (response.ok ? response.json() : null))
    .then((listing) => {
      if (listing) apply("resync", listing);
    })
    .catch(() => {})
    .finally(() => {
      state.resync = null;
    });
}

function toggleSession(id) {
  if (state.expanded.has(id)) state.expanded.delete(id);
  else state.expanded.add(id);
  renderList();
}

function renderList() {
  const body = role("requests");
  clear(body);
  const all = [...state.store.list()];
  state.filters.refresh(all);
  const shown = all.filter((entry) => matches(entry, state.filters.chosen));
  // Requests of one session (newest first); a session with several becomes one row.
  const sessions = new Map();
  for (const entry of shown) {
    const id = sessionOf(entry);
    if (id === null) continue;
    if (!sessions.has(id)) sessions.set(id, []);
    sessions.get(id).push(entry);
  }
  const done = new Set();
  const context = { selected: state.selected, titles: state.titles, onSelect: select };
  for (const entry of shown) {
    const id = sessionOf(entry);
    const members = id === null ? null : sessions.get(id);
    if (!members || members.length < 2) {
      body.append(requestRow(entry, { ...context, inSession: false }));
      continue;
    }
    if (done.has(id)) continue;
    done.add(id);
    const open = state.expanded.has(id);
    body.append(sessionRow(id, members, { open, onToggle: toggleSession }));
    if (open) for (const member of members) body.append(requestRow(member, { ...context, inSession: true }));
  }
  if (all.length && !shown.length) {
    body.append(h("tr", {}, h("td", { colspan: String(COLUMNS), class: "muted" }, t("live.no_match"))));
  }
  role("empty").hidden = all.length > 0;
  const count = t("live.count", all.length, state.shared, state.omitted);
  role("feed-count").textContent = state.filters.active() ? `${count} · ${t("live.shown", shown.length)}` : count;
}

function fact(dl, key, value) {
  if (value === null || value === undefined || value === "") return;
  dl.append(h("dt", {}, t(key)), h("dd", {}, value));
}

function renderDetail() {
  const aside = role("detail");
  const entry = state.selected && state.store.get(state.selected);
  if (!entry) {
    aside.hidden = true;
    return;
  }
  aside.hidden = false;
  role("detail-title").textContent = modelText(entry);
  for (const button of role("detail-mode").querySelectorAll("button")) {
    button.classList.toggle("on", button.dataset.mode === state.mode);
  }
  const model = isModelRequest(entry);
  const dl = role("detail-facts");
  clear(dl);
  fact(dl, "fact.door", doorText(entry));
  fact(dl, "fact.client", entry.client);
  fact(dl, "fact.client_kind", clientKindOf(entry));
  const session = sessionOf(entry);
  if (session !== null) {
    const link = h("a", { href: "#sessions", "data-role": "session-link" }, session);
    link.addEventListener("click", (e) => {
      e.preventDefault();
      showSession(session);
    });
    fact(dl, "fact.session", link);
  }
  fact(dl, "fact.provider", entry.provider);
  fact(dl, "fact.model", entry.model);
  if (model) fact(dl, "fact.level", `${entry.level_requested ?? "—"} → ${entry.level ?? "—"}`);
  fact(dl, "fact.method", entry.thinking_method);
  fact(dl, "fact.status", entry.in_flight ? t("live.inflight") : String(entry.status));
  fact(dl, "fact.error", entry.error);
  fact(dl, "fact.stream", model ? String(entry.stream) : null);
  fact(dl, "fact.ttft", entry.ttft_ms != null ? ms(entry.ttft_ms) : null);
  // Not streamed: the proxy saw the reasoning at once and cannot time it ("—", not "0 ms").
  if (model && !entry.in_flight) {
    const span = thinkingMs(entry);
    fact(dl, "fact.thinking", span !== null ? ms(span) : entry.stream === false ? t("fact.not_streamed") : "—");
  }
  fact(dl, "fact.total", entry.total_ms != null ? ms(entry.total_ms) : null);
  fact(dl, "fact.finish", entry.finish_reason);
  if (entry.reasoning_starved) fact(dl, "fact.warning", h("span", {}, starvedBadge(entry), " ", t("starved.title")));
  if (entry.thinking_dropped) fact(dl, "fact.warning", h("span", {}, droppedBadge(entry), " ", t("dropped.title")));
  const tokens = tokensOf(entry);
  if (tokens.input !== null || tokens.output !== null) fact(dl, "fact.tokens", `${tokens.input ?? "—"} / ${tokens.output ?? "—"}`);
  fact(dl, "fact.cached", tokens.cached !== null ? String(tokens.cached) : null);
  // An estimate (the upstream reported no count) says so: it is the proxy's, not the provider's.
  const estimated = reasoningEstimated(entry) ? ` (${t("fact.estimated")})` : "";
  fact(dl, "fact.reasoning_tokens", tokens.reasoning !== null ? `${tokens.reasoning}${estimated}` : null);
  fact(dl, "fact.cost", entry.cost_usd != null ? usd(entry.cost_usd) : null);
  fact(dl, "fact.tools", toolsText(entry, state.titles));
  if (state.shared) fact(dl, "fact.replica", entry.replica);

  renderChanges(role("changes"), entry);

  const list = role("timeline");
  clear(list);
  const events = (entry.events || []).filter((e) => state.mode === "detailed" || BRIEF_TYPES.has(e.type));
  const timed = entry.stream !== false;
  for (const event of events) list.append(traceItem(event, { titles: state.titles, language: lang(), timed }));
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
  // A listing (the first update of each connection, or re-read after a gap) is merged into what
  // the page holds, not put in its place: after a flood it holds one session's newest rows only,
  // and the other sessions' rows the page already has stay (the store drops the flood's own).
  if (event === "snapshot" || event === "resync") {
    state.store.merge(data.data || [], data.history);
    state.shared = !!data.shared;
    state.omitted = Number.isInteger(data.omitted) ? data.omitted : 0;
    state.titles = data.tool_titles || {};
  } else if (event === "request" || event === "progress") {
    state.store.upsert(data);
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
  state.filters = new FilterBar(role("filters"), renderList);
  role("admin-auth").addEventListener("submit", (e) => {
    e.preventDefault();
    const input = role("admin-key");
    const value = input.value.trim();
    input.value = "";
    setAdminKey(value);
  });
  // A key entered here or in another panel's form: the live view waiting for one connects.
  onAdminKey(() => {
    if (role("connection").dataset.state === "auth") connect();
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
