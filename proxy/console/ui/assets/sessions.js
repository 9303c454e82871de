// The Sessions view: agent sessions (GET /thinkproxy/sessions, docs/sessions.md) newest first,
// filtered by client, model, door or key, a page at a time (the newest page read every five
// seconds while the panel is open, older pages when asked for), and one session
// (GET /thinkproxy/sessions/{id}) as a timeline of turns. Every value is rendered as text.

import { clear, h, role } from "./dom.js";
import { onLangChange, t, usd } from "./i18n.js";
import { clock, shortId } from "./live_rows.js";
import { getJSON, pollWhileOpen } from "./poll.js";
import { SessionFilters } from "./session_filters.js";
import { renderSession } from "./session_timeline.js";
import { percent, tokenText } from "./facts.js";

const POLL_MS = 5000;
const PAGE = 50;
const state = {
  list: null, // the newest page (its `sessions`, `next`, `shared`)
  older: [], // sessions of the older pages read, in order
  olderNext: null, // the cursor after the last older page, null when it was the last
  problem: null,
  selected: null,
  session: null,
  poll: null,
  filters: null, // SessionFilters
};

// Every session listed: the newest page, then the older pages read (a session that became active
// again since moved to the newest page: listed there only).
function listed() {
  const newest = state.list?.sessions || [];
  const ids = new Set(newest.map((s) => s.id));
  return [...newest, ...state.older.filter((s) => !ids.has(s.id))];
}

function nextCursor() {
  return state.older.length ? state.olderNext : state.list?.next ?? null;
}

function levelsText(levels) {
  return Object.entries(levels || {})
    .filter(([, n]) => n > 0)
    .sort((a, b) => b[1] - a[1])
    .map(([level, n]) => `${level === "default" ? t("ss.level.default") : level} ×${n}`)
    .join(" · ");
}

function costText(session) {
  if (session.cost_usd === null || session.cost_usd === undefined) return "—";
  return session.cost_complete === false ? `${usd(session.cost_usd)}+` : usd(session.cost_usd);
}

function sessionRow(session) {
  const tokens = session.tokens || {};
  const tr = h(
    "tr",
    {
      "data-role": "session",
      "data-session": session.id,
      "data-requests": String(session.requests),
      class: session.id === state.selected ? "selected" : null,
      tabindex: "0",
    },
    h("td", { class: "muted" }, clock(session.last_at)),
    h("td", { class: "model", title: session.id }, shortId(session.id)),
    h("td", {}, session.client ?? "—"),
    h("td", {}, (session.doors || []).join(", ")),
    h("td", { class: "num", "data-role": "session-requests" }, String(session.requests)),
    h("td", { class: "model" }, (session.models || []).join(", ")),
    h("td", {}, levelsText(session.levels)),
    h("td", { class: "num" }, tokenText(tokens.input)),
    h("td", { class: "num" }, tokenText(tokens.cached)),
    h("td", { class: "num" }, tokenText(tokens.reasoning)),
    h("td", { class: "num" }, tokenText(tokens.output)),
    h("td", { class: "num", "data-role": "session-cache" }, percent(session.cache_hit_ratio)),
    h("td", { class: "num", "data-role": "session-cost" }, costText(session)),
    h("td", { class: "num" }, session.errors ? h("span", { class: "badge bad" }, String(session.errors)) : "0"),
  );
  const open = () => openSession(session.id);
  tr.addEventListener("click", open);
  tr.addEventListener("keydown", (e) => {
    if (e.key === "Enter") open();
  });
  return tr;
}

function renderList() {
  const body = role("sessions");
  clear(body);
  role("sessions-off").hidden = state.problem !== "off";
  const status = role("sessions-status");
  status.textContent = state.problem === "offline" ? t("ss.offline") : "";
  const sessions = listed();
  state.filters.refresh(sessions);
  for (const session of sessions) body.append(sessionRow(session));
  role("sessions-empty").hidden = sessions.length > 0 || state.problem === "off";
  role("sessions-more").hidden = state.problem !== null || !nextCursor();
  if (state.list && !state.problem) {
    status.textContent = t("ss.count", sessions.length, !!state.list.shared, !!nextCursor());
  }
}

async function loadOlder() {
  const cursor = nextCursor();
  if (!cursor) return;
  const url = `/thinkproxy/sessions?limit=${PAGE}${state.filters.query()}&cursor=${encodeURIComponent(cursor)}`;
  const { status, body } = await getJSON(url);
  if (status !== 200 || !body) return;
  state.older.push(...(body.sessions || []));
  state.olderNext = body.next ?? null;
  renderList();
}

function renderDetail() {
  const aside = role("session-detail");
  aside.hidden = !state.session;
  if (!state.session) return;
  renderSession(aside, state.session);
}

async function openSession(id) {
  state.selected = id;
  renderList();
  const { status, body } = await getJSON(`/thinkproxy/sessions/${encodeURIComponent(id)}`);
  if (state.selected !== id) return; // another was opened meanwhile
  state.session = status === 200 && body ? body : null;
  renderDetail();
}

async function load() {
  const { status, body } = await getJSON(`/thinkproxy/sessions?limit=${PAGE}${state.filters.query()}`);
  if (status === 401) return false;
  if (status === 404) {
    state.problem = "off";
    state.list = null;
  } else if (status === 200 && body) {
    state.problem = null;
    state.list = body;
  } else {
    state.problem = "offline";
  }
  renderList();
  if (state.selected) await openSession(state.selected);
  return true;
}

// Opens the Sessions view on one session (the live view's detail links here).
export function showSession(id) {
  state.selected = id;
  state.session = null;
  location.hash = "#sessions";
}

export function initSessions() {
  state.filters = new SessionFilters(role("sessions-filters"), () => {
    state.older = []; // other filters, other pages
    state.olderNext = null;
    state.poll.refresh();
  });
  role("sessions-more").addEventListener("click", loadOlder);
  state.poll = pollWhileOpen("sessions", load, POLL_MS, "sessions-auth", "sessions-key");
  onLangChange(() => {
    renderList();
    renderDetail();
  });
}
