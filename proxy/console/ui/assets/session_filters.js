// The Sessions view's filters: client, model, door and key, each a <select data-sfilter="NAME">
// whose choices are the values seen in the sessions listed; the proxy filters
// (GET /thinkproxy/sessions?client=&model=&door=&key=, docs/sessions.md).

import { h } from "./dom.js";
import { t } from "./i18n.js";

// The values of each filter in one session summary.
const VALUES = {
  client: (s) => [s.client],
  model: (s) => s.models || [],
  door: (s) => s.doors || [],
  key: (s) => [s.key],
};

export class SessionFilters {
  constructor(root, onChange) {
    this.root = root;
    this.chosen = {};
    this.seen = Object.fromEntries(Object.keys(VALUES).map((name) => [name, new Set()]));
    for (const select of root.querySelectorAll("select[data-sfilter]")) {
      select.addEventListener("change", () => {
        this.chosen[select.dataset.sfilter] = select.value;
        onChange();
      });
    }
  }

  // The query string of the filters chosen ("&client=codex&door=messages"), "" for none.
  query() {
    return Object.entries(this.chosen)
      .filter(([, value]) => value)
      .map(([name, value]) => `&${name}=${encodeURIComponent(value)}`)
      .join("");
  }

  refresh(sessions) {
    for (const session of sessions) {
      for (const [name, values] of Object.entries(VALUES)) {
        for (const value of values(session)) if (typeof value === "string" && value) this.seen[name].add(value);
      }
    }
    for (const select of this.root.querySelectorAll("select[data-sfilter]")) {
      const name = select.dataset.sfilter;
      const values = ["", ...[...this.seen[name]].sort()];
      const labels = values.map((v) => (v === "" ? t(`filter.${name}.all`) : name === "door" ? t(`door.${v}`) : v));
      const have = [...select.options].map((o) => `${o.value}|${o.textContent}`).join("\n");
      if (have === values.map((v, i) => `${v}|${labels[i]}`).join("\n")) continue;
      select.replaceChildren(...values.map((v, i) => h("option", { value: v }, labels[i])));
      select.value = this.chosen[name] || "";
    }
  }
}
