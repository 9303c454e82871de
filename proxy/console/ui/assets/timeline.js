// One trace event → one <li data-role="trace-item" data-kind="<type>">. Tool events are cards.
// Text comes from the event's structured fields in the page's language (the event's own
// `message` is in the language of whoever made the request); never inserted as HTML.

import { h } from "./dom.js";
import { ms, t } from "./i18n.js";

// The review gate's events, notes and warnings are shown in both modes, as the client gets them in both.
export const BRIEF_TYPES = new Set(["status", "note", "tool_call.start", "warning", "error", "done", "review.request", "review.decision"]);

// A call held for a reviewer: the hold opens at `review.request` and closes at `review.decision`
// (its `t_ms` minus the request's is the wait; both times are on the timeline).
const HOLD_TEXT = {
  en: { request: "Held for a reviewer", approve: "approved", modify: "modified", reject: "rejected", timeout: "review timed out", refused: "refused without review" },
  zh: { request: "等待人工审核", approve: "已批准", modify: "已修改", reject: "已拒绝", timeout: "审核超时", refused: "未审核，已拒绝" },
};

function holdItem(event, language) {
  const text = HOLD_TEXT[language] || HOLD_TEXT.en;
  const tool = h("code", { class: "tool-name" }, String(event.tool ?? ""));
  if (event.type === "review.request") {
    return h("div", { class: "hold hold-open" }, h("span", {}, `${text.request} `), tool,
      event.input_summary ? h("div", { class: "muted" }, String(event.input_summary)) : null);
  }
  const verdict = String(event.decision ?? "");
  return h("div", { class: `hold hold-closed hold-${verdict}` }, tool, h("span", {}, ` ${text[verdict] ?? verdict}`),
    event.comment ? h("span", { class: "muted" }, ` · ${String(event.comment)}`) : null);
}

// The display title of a tool: the event's own (from the proxy's tool titles file, in the
// request's language), else the console's copy of the map in the page's language, else the name.
export function toolTitle(event, titles, language) {
  const name = String(event.name ?? "");
  const mapped = titles && Object.prototype.hasOwnProperty.call(titles, name) ? titles[name] : null;
  if (mapped && mapped[language]) return mapped[language];
  return event.title ? String(event.title) : name;
}

function toolCard(event, titles, language, lines) {
  const title = toolTitle(event, titles, language);
  const name = String(event.name ?? "");
  return h(
    "div",
    { class: "tool-card" },
    h(
      "div",
      { class: "tool-head" },
      h("span", { class: "tool-title", "data-role": "tool-title" }, title),
      title !== name ? h("code", { class: "tool-name" }, name) : null,
      event.status ? h("span", { class: `badge ${event.status === "error" ? "bad" : "ok"}` }, t(`tool.${event.status === "error" ? "error" : "success"}`)) : null,
      event.duration_ms !== undefined ? h("span", { class: "muted" }, ms(event.duration_ms)) : null,
    ),
    ...lines,
  );
}

// `timed` false: the answer was not streamed, so the reasoning came at once and its span (0 ms)
// says nothing: the item says so instead of "Thought for 0 ms".
export function traceItem(event, { titles = {}, language = "en", timed = true } = {}) {
  const kind = String(event.type ?? "");
  let body;
  switch (kind) {
    case "status":
      body = h("span", { class: `stage stage-${event.stage}` }, t(`stage.${event.stage}`));
      break;
    case "reasoning.start":
      body = h("span", {}, t("ev.reasoning.start"));
      break;
    case "reasoning.end":
      body = h("span", {}, timed ? t("ev.reasoning.end", ms(event.duration_ms)) : t("ev.reasoning.end.untimed"));
      break;
    case "tool_call.start":
      body = toolCard(event, titles, language, [h("div", { class: "muted" }, t("ev.tool.calling"))]);
      break;
    case "tool_call.end":
      body = toolCard(event, titles, language, [
        h("div", { class: "tool-line" }, h("span", { class: "label" }, t("tool.input")), h("code", {}, String(event.input_summary ?? ""))),
      ]);
      break;
    case "tool_result":
      body = toolCard(event, titles, language, [
        h("div", { class: "tool-line" }, h("span", { class: "label" }, t("tool.output")), h("code", {}, String(event.output_summary ?? ""))),
      ]);
      break;
    case "error":
      body = h("span", { class: "error" }, `${t("ev.error")}: ${String(event.message ?? "")}`);
      break;
    case "warning":
      // (The reasoning-starved warning in the page's language; any other, its own message.)
      body = h("span", { class: "warning" }, `${t("ev.warning")}: `,
        event.code === "reasoning_starved" ? t("starved.title") : String(event.message ?? ""),
        event.reasoning_tokens !== undefined ? h("span", { class: "muted" }, ` · ${t("fact.reasoning_tokens")} ${event.reasoning_tokens}`) : null,
        event.max_tokens !== undefined ? h("span", { class: "muted" }, ` · max_tokens ${event.max_tokens}`) : null);
      break;
    case "review.request":
    case "review.decision":
      body = holdItem(event, language);
      break;
    case "done": {
      const bits = [];
      if (event.finish_reason) bits.push(`${t("done.finish")}: ${event.finish_reason}`);
      if (event.ttft_ms !== null && event.ttft_ms !== undefined) bits.push(`${t("done.ttft")}: ${ms(event.ttft_ms)}`);
      body = h("span", {}, t("ev.done", ms(event.total_ms)), bits.length ? h("span", { class: "muted" }, ` · ${bits.join(" · ")}`) : null);
      break;
    }
    default:
      body = h("span", {}, String(event.message ?? kind));
  }
  return h(
    "li",
    { "data-role": "trace-item", "data-kind": kind, class: `item kind-${kind.replace(".", "-")}` },
    h("span", { class: "t" }, ms(event.t_ms)),
    h("span", { class: "dot" }),
    h("div", { class: "what" }, body),
  );
}
