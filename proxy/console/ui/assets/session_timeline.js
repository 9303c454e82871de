// One session as a timeline of turns: a user turn, the model calls it took (each with its level,
// thinking time, tokens, cache hits and cost, and what the proxy changed), the tool calls between
// them, and the answer; with running totals. Built from the session's request facts
// (its `details`, docs/sessions.md), oldest first.

import { renderChanges } from "./diff.js";
import { clear, h } from "./dom.js";
import { ms, t, usd } from "./i18n.js";
import { clock } from "./live_rows.js";
import { percent, spanOrNull, tokenText } from "./facts.js";

// A turn goes on while the model answers with tool calls; any other ending (an answer, a length
// cut, an error) closes it, and the next request starts the next turn.
export function turnsOf(requests) {
  const turns = [];
  let current = null;
  for (const request of requests) {
    if (!current) {
      current = [];
      turns.push(current);
    }
    current.push(request);
    if (request.finish_reason !== "tool_calls") current = null;
  }
  return turns;
}

function cacheText(tokens) {
  if (!tokens || !tokens.input || tokens.cached === null || tokens.cached === undefined) return "—";
  return `${Math.round((tokens.cached / tokens.input) * 100)}%`;
}

function figure(label, value, roleName) {
  return h("span", { class: "figure", "data-role": roleName }, h("span", { class: "muted" }, label), " ", value);
}

function callItem(request, running) {
  const tokens = request.tokens || {};
  const failed = request.status >= 400 || !!request.error;
  const level = request.level ?? t("ss.level.default");
  const tools = request.tools || [];
  const more = (request.tool_calls ?? tools.length) - tools.length;
  const changes = h("div", { class: "changes" });
  renderChanges(changes, request);
  const ended = request.finish_reason !== "tool_calls";
  return h(
    "li",
    { class: `call${failed ? " failed" : ""}`, "data-role": "call", "data-id": request.id },
    h(
      "div",
      { class: "call-head" },
      h("span", { class: "muted" }, clock(request.at)),
      h("span", { class: "call-kind" }, t("ss.model_call")),
      h("code", {}, request.model ?? "—"),
      h("span", { class: `badge level-${request.level ?? "default"}`, "data-role": "call-level" }, level),
      failed ? h("span", { class: "badge bad" }, `${request.status}${request.error ? ` ${request.error}` : ""}`) : null,
    ),
    h(
      "div",
      { class: "figures" },
      figure(t("ss.thinking"), ms(spanOrNull(request.thinking_ms, tokens.reasoning)), "call-thinking"),
      figure(t("col.in"), tokenText(tokens.input)),
      figure(t("col.cached"), tokens.cached == null ? "—" : `${tokenText(tokens.cached)} (${cacheText(tokens)})`, "call-cache"),
      figure(t("col.reasoning"), tokenText(tokens.reasoning)),
      figure(t("col.out"), tokenText(tokens.output)),
      figure(t("col.cost"), request.cost_usd != null ? usd(request.cost_usd) : "—", "call-cost"),
    ),
    tools.length
      ? h("div", { class: "call-tools", "data-role": "call-tools" }, `⚙ ${t("ss.tool_calls")}: ${tools.join(", ")}${more > 0 ? ` +${more}` : ""}`)
      : null,
    changes,
    ended && !failed
      ? h("div", { class: "call-answer", "data-role": "call-answer" }, `✓ ${t("ss.answer")} (${request.finish_reason ?? "—"})`)
      : null,
    h(
      "div",
      { class: "running muted", "data-role": "running" },
      t("ss.running", running.requests, tokenText(running.input), tokenText(running.output), running.cost != null ? usd(running.cost) : "—"),
    ),
  );
}

function sessionFacts(session) {
  const tokens = session.tokens || {};
  const rows = [
    [t("ss.col.client"), session.client],
    [t("ss.source"), session.source],
    [t("ss.col.doors"), (session.doors || []).join(", ")],
    [t("ss.col.requests"), String(session.requests ?? 0)],
    [t("ss.col.models"), (session.models || []).join(", ")],
    [t("ss.tokens"), `${tokenText(tokens.input)} / ${tokenText(tokens.cached)} / ${tokenText(tokens.reasoning)} / ${tokenText(tokens.output)}`],
    [t("ss.col.cache"), percent(session.cache_hit_ratio)],
    [t("ss.col.cost"), session.cost_usd != null ? usd(session.cost_usd) + (session.cost_complete === false ? ` (${t("ss.partial")})` : "") : "—"],
    [t("ss.col.errors"), String(session.errors ?? 0)],
  ];
  if (session.details_dropped) rows.push([t("ss.dropped"), String(session.details_dropped)]);
  return rows.filter(([, v]) => v !== null && v !== undefined && v !== "").flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]);
}

// Renders `session` (a /thinkproxy/sessions/{id} answer) into the detail aside.
export function renderSession(aside, session) {
  aside.querySelector('[data-role="session-title"]').textContent = session.id;
  const facts = aside.querySelector('[data-role="session-facts"]');
  clear(facts);
  facts.append(...sessionFacts(session));
  const list = aside.querySelector('[data-role="session-timeline"]');
  clear(list);
  const running = { requests: 0, input: 0, output: 0, cost: null };
  turnsOf(Array.isArray(session.details) ? session.details : []).forEach((calls, index) => {
    const items = calls.map((request) => {
      const tokens = request.tokens || {};
      running.requests += 1;
      running.input += tokens.input ?? 0;
      running.output += tokens.output ?? 0;
      if (typeof request.cost_usd === "number") running.cost = (running.cost ?? 0) + request.cost_usd;
      return callItem(request, running);
    });
    list.append(
      h(
        "li",
        { class: "turn", "data-role": "turn", "data-calls": String(calls.length) },
        h("div", { class: "turn-head" }, t("ss.turn", index + 1, calls.length)),
        h("ol", { class: "calls" }, items),
      ),
    );
  });
  if (!list.firstChild) list.append(h("li", { class: "muted" }, t("ss.no_details")));
}
