// Per client key (THINKPROXY_POLICY_FILE): requests, reasoning tokens, spend by the policy's
// price table and what each budget has left, read from GET /thinkproxy/usage (admin keys, like
// the live data) every five seconds while the panel is open. Every value is rendered as text.

import { adminHeaders, setAdminKey } from "./admin.js";
import { clear, h, role } from "./dom.js";
import { onLangChange, t, usd } from "./i18n.js";

const POLL_MS = 5000;
const state = { timer: null, report: null, problem: null };

function budgetText(budget) {
  if (!budget) return t("cl.nobudget");
  if (budget.left === null || budget.left === undefined) return t("cl.budget.unknown", budget.limit, budget.per);
  return t("cl.budget", budget.left, budget.limit, budget.per);
}

function reasoningText(client) {
  const reported = client.reasoning_tokens ?? 0;
  const estimated = client.reasoning_tokens_estimated ?? 0;
  return estimated ? t("cl.reasoning.estimated", reported + estimated, estimated) : String(reported);
}

function render() {
  const body = role("clients");
  clear(body);
  const status = role("clients-status");
  role("clients-off").hidden = state.problem !== "off";
  if (state.problem === "off") {
    status.textContent = "";
    return;
  }
  if (state.problem === "offline") {
    status.textContent = t("cl.offline");
    return;
  }
  const report = state.report;
  if (!report) return;
  const clients = Object.entries(report.clients || {});
  for (const [name, client] of clients) {
    const exhausted = client.budget && client.budget.left === 0;
    body.append(
      h(
        "tr",
        { "data-role": "client", "data-client": name },
        h("td", { class: "model" }, name),
        h("td", {}, client.max_level ?? "—"),
        h("td", { class: "num", "data-role": "client-requests" }, String(client.requests ?? 0)),
        h("td", { class: "num", "data-role": "client-reasoning" }, reasoningText(client)),
        h("td", { class: "num", "data-role": "client-spend" }, usd(client.cost_usd)),
        h("td", { "data-role": "client-budget" },
          h("span", { class: exhausted ? "badge bad" : null }, budgetText(client.budget)),
          exhausted && client.on_exhausted ? h("span", { class: "muted" }, ` · ${t(`cl.exhausted.${client.on_exhausted}`)}`) : null),
      ),
    );
  }
  role("clients-empty").hidden = clients.length > 0;
  const since = report.since ? new Date(report.since * 1000).toLocaleString() : "";
  const store = report.budget_store || {};
  status.textContent = t("cl.since", since, store.name ?? "", store.errors ?? 0);
}

async function load() {
  let response;
  try {
    response = await fetch("/thinkproxy/usage", { headers: adminHeaders({ Accept: "application/json" }), cache: "no-store" });
  } catch {
    state.problem = "offline";
    render();
    return;
  }
  if (response.status === 401) {
    role("clients-auth").hidden = false;
    stop();
    return;
  }
  role("clients-auth").hidden = true;
  if (response.status === 404) {
    state.problem = "off";
    state.report = null;
  } else if (response.ok) {
    state.problem = null;
    state.report = await response.json();
  } else {
    state.problem = "offline";
  }
  render();
}

function start() {
  stop();
  load();
  state.timer = setInterval(load, POLL_MS);
}

function stop() {
  if (state.timer) clearInterval(state.timer);
  state.timer = null;
}

function follow() {
  if (location.hash === "#clients") start();
  else stop();
}

export function initClients() {
  role("clients-auth").addEventListener("submit", (e) => {
    e.preventDefault();
    const input = role("clients-key");
    setAdminKey(input.value.trim());
    input.value = "";
    start();
  });
  onLangChange(render);
  window.addEventListener("hashchange", follow);
  follow();
}
