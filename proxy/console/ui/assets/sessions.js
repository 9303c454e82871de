// The Sessions view: agent sessions (GET /thinkproxy/sessions, docs/sessions.md) newest first,
// and one session (GET /thinkproxy/sessions/{id}) as a timeline of turns. Read every five seconds
// while the panel is open. Every value is rendered as text.

import { clear, h, role } from "./dom.js";
import { onLangChange, t, usd } from "./i18n.js";
import { clock, shortId } from "./live_rows.js";
import { getJSON, pollWhileOpen } from "./poll.js";
import { renderSession } from "./session_timeline.js";
import { percent, tokenText } from "./facts.js";

const POLL_MS = 5000;
const state = { list: null, problem: null, selected: null, session: null, poll: null };

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
  const sessions = state.list?.sessions || [];
  for (const session of sessions) body.append(sessionRow(session));
  role("sessions-empty").hidden = sessions.length > 0 || state.problem === "off";
  if (state.list && !state.problem) {
    status.textContent = t("ss.count", sessions.length, !!state.list.shared, !!state.list.next);
  }
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
  const { status, body } = await getJSON("/thinkproxy/sessions?limit=200");
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
  state.poll = pollWhileOpen("sessions", load, POLL_MS, "sessions-auth", "sessions-key");
  onLangChange(() => {
    renderList();
    renderDetail();
  });
}
