// The live list's rows: one per request, and one per agent session that has several requests in
// the list (collapsed: its count, levels, token and cost sums; opened: its requests beneath it).

import { h } from "./dom.js";
import {
  clientKindOf,
  costOf,
  doorText,
  levelText,
  modelText,
  outcomeOf,
  sessionOf,
  sum,
  thinkingMs,
  tokenText,
  tokensOf,
} from "./facts.js";
import { lang, ms, t, usd } from "./i18n.js";
import { toolTitle } from "./timeline.js";

export const COLUMNS = 15;

export function clock(epochMs) {
  const d = new Date(epochMs);
  return [d.getHours(), d.getMinutes(), d.getSeconds()].map((n) => String(n).padStart(2, "0")).join(":");
}

export function toolsText(entry, titles) {
  const tools = entry.tool_calls || [];
  return tools.map((tool) => toolTitle(tool, titles, lang())).join(", ");
}

// The reasoning used the whole output limit and left no answer (trace warning reasoning_starved).
export function starvedBadge(entry) {
  if (!entry.reasoning_starved) return null;
  return h("span", { class: "badge warn", "data-role": "starved", title: t("starved.title") }, t("starved.badge"));
}

// A native upstream dropped thinking blocks of the history (its input_transformations: the prefix
// before them changed), so the model did not see reasoning the user paid for (trace warning
// thinking_dropped).
export function droppedBadge(entry) {
  if (!entry.thinking_dropped) return null;
  return h(
    "span",
    { class: "badge warn", "data-role": "thinking-dropped", title: t("dropped.title") },
    t("dropped.badge", entry.thinking_dropped),
  );
}

function statusCell(entry) {
  if (entry.in_flight) return h("span", { class: "badge run" }, t("live.inflight"));
  const ok = outcomeOf(entry) === "ok";
  return [
    h("span", { class: `badge ${ok ? "ok" : "bad"}` }, String(entry.status ?? ""), entry.error ? ` ${entry.error}` : ""),
    starvedBadge(entry),
    droppedBadge(entry),
  ];
}

function tokenCells(tokens) {
  return ["input", "cached", "reasoning", "output"].map((name) =>
    h("td", { class: "num", "data-role": `cell-${name}` }, tokenText(tokens[name])),
  );
}

function activate(tr, fn) {
  tr.addEventListener("click", fn);
  tr.addEventListener("keydown", (e) => {
    if (e.key === "Enter") fn();
  });
  return tr;
}

export function requestRow(entry, { selected, titles, inSession, onSelect }) {
  const classes = [entry.id === selected ? "selected" : "", inSession ? "in-session" : ""].join(" ").trim();
  const tr = h(
    "tr",
    {
      "data-role": "request",
      "data-id": entry.id,
      "data-status": entry.in_flight ? "in_flight" : String(entry.status),
      "data-session": sessionOf(entry),
      class: classes || null,
      tabindex: "0",
    },
    h("td", { class: "muted" }, clock(entry.started_at)),
    h("td", { "data-role": "cell-door" }, doorText(entry)),
    h("td", {}, entry.provider ?? "—"),
    h("td", { class: "model", "data-role": "cell-model" }, modelText(entry)),
    h("td", { "data-role": "cell-level" }, levelText(entry)),
    h("td", {}, statusCell(entry)),
    h("td", { class: "num" }, ms(entry.ttft_ms)),
    h("td", { class: "num", "data-role": "cell-thinking" }, ms(thinkingMs(entry))),
    h("td", { class: "num" }, ms(entry.total_ms)),
    ...tokenCells(tokensOf(entry)),
    h("td", { class: "num", "data-role": "cost" }, costOf(entry) !== null ? usd(costOf(entry)) : ""),
    h("td", { class: "tools" }, toolsText(entry, titles)),
  );
  return activate(tr, () => onSelect(entry.id));
}

// "deep ×12 · off ×3": the applied levels of a session's requests, most used first.
function levelTally(entries) {
  const counts = new Map();
  for (const entry of entries) if (entry.level) counts.set(entry.level, (counts.get(entry.level) ?? 0) + 1);
  return [...counts]
    .sort((a, b) => b[1] - a[1])
    .map(([level, n]) => `${level} ×${n}`)
    .join(" · ");
}

// entries: the session's requests in the list, newest first.
export function sessionRow(id, entries, { open, onToggle }) {
  const errors = entries.filter((e) => outcomeOf(e) === "error").length;
  const running = entries.filter((e) => e.in_flight).length;
  const tokens = entries.map(tokensOf);
  const doors = [...new Set(entries.map(doorText))].join(", ");
  const models = [...new Set(entries.map((e) => e.model).filter(Boolean))].join(", ");
  const kind = entries.map(clientKindOf).find(Boolean);
  const tools = sum(entries.map((e) => (e.tool_calls || []).length));
  const cost = sum(entries.map(costOf));
  const tr = h(
    "tr",
    {
      "data-role": "session-row",
      "data-session": id,
      "data-count": String(entries.length),
      "aria-expanded": open ? "true" : "false",
      class: "session-row",
      tabindex: "0",
    },
    h("td", { class: "muted" }, clock(entries[0].started_at)),
    h("td", {}, doors),
    h(
      "td",
      { colspan: "2" },
      // Cut to the cell's width (the whole in its tooltip): a session's row never widens the list.
      h(
        "div",
        { class: "session-name", title: `${id}${models ? ` · ${models}` : ""}` },
        h("span", { class: "twisty" }, open ? "▾" : "▸"),
        " ",
        t("live.session", entries.length, kind),
        " ",
        h("code", { class: "muted" }, shortId(id)),
        models ? h("span", { class: "muted" }, ` · ${models}`) : null,
      ),
    ),
    h("td", {}, h("div", { class: "tally", title: levelTally(entries) }, levelTally(entries))),
    h("td", {}, [
      errors ? h("span", { class: "badge bad" }, t("live.errors", errors)) : h("span", { class: "badge ok" }, "✓"),
      running ? h("span", { class: "badge run" }, t("live.inflight")) : null,
    ]),
    h("td", { class: "num" }, ""),
    h("td", { class: "num" }, ms(sum(entries.map(thinkingMs)))),
    h("td", { class: "num" }, ms(sum(entries.map((e) => e.total_ms)))),
    ...tokenCells({
      input: sum(tokens.map((x) => x.input)),
      cached: sum(tokens.map((x) => x.cached)),
      reasoning: sum(tokens.map((x) => x.reasoning)),
      output: sum(tokens.map((x) => x.output)),
    }),
    h("td", { class: "num", "data-role": "cost" }, cost !== null ? usd(cost) : ""),
    h("td", { class: "tools" }, tools ? t("live.tool_calls", tools) : ""),
  );
  return activate(tr, () => onToggle(id));
}

export function shortId(id) {
  return id.length > 14 ? `${id.slice(0, 12)}…` : id;
}
