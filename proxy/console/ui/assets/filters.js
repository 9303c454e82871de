// The live list's filters (model, door, client, level, status, key) and its search. Each filter is
// a <select data-filter="NAME"> whose choices are the values among the requests held; "" = all.

import { clientKindOf, doorOf, keyOf, outcomeOf, sessionOf } from "./facts.js";
import { h } from "./dom.js";
import { t } from "./i18n.js";

const OUTCOMES = ["ok", "error", "in_flight"];

// The value of each filter for one request (a string, or null when the request has none).
const VALUE = {
  model: (e) => (doorOf(e) === null ? null : e.model ?? null),
  door: (e) => doorOf(e) ?? "passthrough",
  client: (e) => clientKindOf(e),
  level: (e) => (doorOf(e) === null ? null : e.level ?? null),
  status: (e) => (e.in_flight ? null : e.status == null ? null : String(e.status)),
  key: (e) => keyOf(e),
};
export const FILTERS = Object.keys(VALUE);

export function matches(entry, chosen) {
  for (const name of FILTERS) {
    const want = chosen[name];
    if (!want) continue;
    if (name === "status" && OUTCOMES.includes(want)) {
      if (outcomeOf(entry) !== want) return false;
    } else if (VALUE[name](entry) !== want) {
      return false;
    }
  }
  return !chosen.search || searchable(entry).includes(chosen.search);
}

// What the search box looks in: names and figures already on the row, never anything private
// (the summary holds nothing private).
function searchable(entry) {
  const tools = (entry.tool_calls || []).map((tool) => `${tool.name} ${tool.title ?? ""}`);
  return [
    entry.id, entry.model, entry.method, entry.path, entry.provider, entry.error, entry.status,
    entry.level, entry.finish_reason, doorOf(entry), clientKindOf(entry), keyOf(entry), sessionOf(entry), ...tools,
  ]
    .filter((v) => v !== null && v !== undefined)
    .join(" ")
    .toLowerCase();
}

export class FilterBar {
  constructor(root, onChange) {
    this.root = root;
    this.chosen = { search: "" };
    for (const select of root.querySelectorAll("select[data-filter]")) {
      select.addEventListener("change", () => {
        this.chosen[select.dataset.filter] = select.value;
        onChange();
      });
    }
    const search = root.querySelector('[data-role="search"]');
    search.addEventListener("input", () => {
      this.chosen.search = search.value.trim().toLowerCase();
      onChange();
    });
  }

  active() {
    return FILTERS.some((name) => this.chosen[name]) || !!this.chosen.search;
  }

  // The choices of each filter: the values among `entries` (and the one chosen, even if no
  // request held has it any more), each with its label.
  refresh(entries) {
    const seen = Object.fromEntries(FILTERS.map((name) => [name, new Set()]));
    for (const entry of entries) {
      for (const name of FILTERS) {
        const value = VALUE[name](entry);
        if (value !== null && value !== undefined) seen[name].add(value);
      }
    }
    for (const select of this.root.querySelectorAll("select[data-filter]")) {
      const name = select.dataset.filter;
      const values = [...seen[name]].sort();
      if (name === "status") values.unshift(...OUTCOMES);
      const chosen = this.chosen[name] || "";
      if (chosen && !values.includes(chosen)) values.push(chosen);
      const wanted = ["", ...values];
      const have = [...select.options].map((o) => `${o.value}|${o.textContent}`);
      const labels = wanted.map((v) => label(name, v));
      if (have.join("\n") === wanted.map((v, i) => `${v}|${labels[i]}`).join("\n")) continue;
      select.replaceChildren(...wanted.map((v, i) => h("option", { value: v }, labels[i])));
      select.value = chosen;
    }
  }
}

function label(name, value) {
  if (value === "") return t(`filter.${name}.all`);
  if (name === "door") return t(`door.${value}`);
  if (name === "status" && OUTCOMES.includes(value)) return t(`filter.status.${value}`);
  if (name === "level") return t(`level.${value}`);
  return value;
}
