// What the proxy changed in a request: the request as it came against the body sent upstream, as
// a list of the thinking-related fields set, changed or removed and the messages it injected.
// The proxy sends only field names and short summaries (docs/sessions.md): never reasoning text,
// prompts or keys. Everything is inserted as text.

import { clear, h } from "./dom.js";
import { t } from "./i18n.js";

const SIGN = { set: "+", removed: "−", changed: "~", injected: "+" };

// One change as the proxy lists it: {field, change: set | removed | changed | injected, from?,
// to?, summary?} (docs/sessions.md, "Per-request facts").
function normalize(change) {
  if (!change || typeof change !== "object" || typeof change.field !== "string") return null;
  const op = Object.hasOwn(SIGN, change.change) ? change.change : "changed";
  return { op, field: change.field, from: change.from, to: change.to, summary: change.summary };
}

function valueText(value) {
  if (value === undefined) return null;
  const text = typeof value === "string" ? value : JSON.stringify(value);
  return text.length > 160 ? `${text.slice(0, 160)}…` : text;
}

function changesOf(entry) {
  return Array.isArray(entry.changes) ? entry.changes.map(normalize).filter(Boolean) : [];
}

// Renders into `box` (a [data-role="changes"] block of the detail): hidden when there is nothing.
export function renderChanges(box, entry) {
  clear(box);
  const changes = changesOf(entry);
  box.hidden = changes.length === 0;
  if (!changes.length) return;
  box.append(h("h3", {}, t("diff.title")));
  const list = h("ul", { class: "diff" });
  for (const change of changes) {
    const from = valueText(change.from);
    const to = valueText(change.to);
    list.append(
      h(
        "li",
        { class: `diff-${change.op}`, "data-role": "change", "data-op": change.op, "data-field": change.field },
        h("span", { class: "sign" }, SIGN[change.op]),
        h("code", { class: "field" }, change.field),
        from !== null ? h("span", { class: "from" }, from) : null,
        from !== null && to !== null ? h("span", { class: "arrow" }, "→") : null,
        to !== null ? h("span", { class: "to" }, to) : null,
        change.summary ? h("span", { class: "muted summary" }, change.summary) : null,
      ),
    );
  }
  box.append(list);
}
