// The playground: one request through this proxy's own /v1/chat/completions, streamed with
// `event` traces. The API key lives in this page's memory only (never stored). Model output is
// appended as text nodes: whatever it contains, it is never parsed as HTML.

import { clear, role } from "./dom.js";
import { lang, ms, onLangChange, t } from "./i18n.js";
import { errorText, readEvents } from "./sse.js";
import { traceItem } from "./timeline.js";

const WEATHER_TOOL = {
  type: "function",
  function: {
    name: "get_weather",
    description: "Current weather for a city",
    parameters: {
      type: "object",
      properties: { city: { type: "string" }, unit: { type: "string", enum: ["C", "F"] } },
      required: ["city"],
    },
  },
};

const run = {
  controller: null,
  started: 0,
  thinkingSince: null, // page clock when reasoning started, while it lasts
  thoughtMs: null, // from the trace once reasoning ended
  hidden: false,
  timer: null,
  sawReasoning: false,
};

function thinkingBlock() {
  const block = role("thinking");
  const summary = role("thinking-summary");
  if (run.thoughtMs !== null) summary.textContent = t("pg.thought", ms(run.thoughtMs));
  else if (run.thinkingSince !== null) summary.textContent = t("pg.thinking", ms(performance.now() - run.thinkingSince));
  block.hidden = !(run.sawReasoning || run.thoughtMs !== null || run.thinkingSince !== null);
}

function startThinking() {
  if (run.thinkingSince !== null || run.thoughtMs !== null) return;
  run.thinkingSince = performance.now();
  role("thinking").open = true;
  run.timer = setInterval(thinkingBlock, 100);
  thinkingBlock();
}

function endThinking(durationMs) {
  if (durationMs !== undefined && durationMs !== null) run.thoughtMs = durationMs;
  else if (run.thinkingSince !== null && run.thoughtMs === null) run.thoughtMs = performance.now() - run.thinkingSince;
  run.thinkingSince = null;
  clearInterval(run.timer);
  run.timer = null;
  thinkingBlock();
}

function onTrace(event) {
  role("pg-timeline").append(traceItem(event, { language: lang() }));
  switch (event.type) {
    case "reasoning.start":
      startThinking();
      break;
    case "status":
      if (event.stage === "thinking") startThinking();
      else if (run.thinkingSince !== null) endThinking();
      break;
    case "reasoning.end":
      endThinking(event.duration_ms);
      break;
    case "done":
      if (event.reasoning_ms) endThinking(run.thoughtMs ?? event.reasoning_ms);
      else if (run.thinkingSince !== null) endThinking();
      role("pg-status").textContent = t("pg.done", ms(event.total_ms));
      break;
    default:
  }
}

function onChunk(chunk) {
  if (chunk.error) {
    role("pg-error").textContent = String(chunk.error.message ?? JSON.stringify(chunk.error));
    return;
  }
  for (const choice of chunk.choices || []) {
    const delta = choice.delta || {};
    const reasoning = delta.reasoning_content ?? delta.reasoning;
    if (typeof reasoning === "string" && reasoning) {
      run.sawReasoning = true;
      startThinking();
      role("reasoning").append(reasoning);
    }
    if (typeof delta.content === "string" && delta.content) {
      if (run.thinkingSince !== null && delta.content.trim()) endThinking();
      role("answer").append(delta.content);
    }
  }
}

function reset() {
  clearInterval(run.timer);
  Object.assign(run, { started: performance.now(), thinkingSince: null, thoughtMs: null, timer: null, sawReasoning: false });
  for (const name of ["reasoning", "pg-timeline", "answer"]) clear(role(name));
  role("pg-error").textContent = "";
  role("thinking").hidden = true;
}

function busy(on) {
  role("send").disabled = on;
  role("stop").disabled = !on;
}

async function send(event) {
  event.preventDefault();
  const prompt = role("prompt").value;
  if (!prompt.trim()) {
    role("pg-error").textContent = t("pg.needprompt");
    return;
  }
  reset();
  run.hidden = role("reasoning-visibility").value === "hide";
  const headers = {
    "Content-Type": "application/json",
    Accept: "text/event-stream",
    "Accept-Language": lang() === "zh" ? "zh-CN" : "en",
    "X-Trace": role("trace-mode").value,
    "X-Trace-Format": "event",
    "X-Reasoning": role("reasoning-visibility").value,
  };
  const key = role("api-key").value.trim();
  if (key) headers.Authorization = `Bearer ${key}`;
  const level = role("level").value;
  if (level) headers["X-Thinking-Level"] = level;
  const upstream = role("upstream").value.trim();
  if (upstream) headers["X-Upstream-Base-URL"] = upstream;
  const body = { model: role("model").value.trim(), messages: [{ role: "user", content: prompt }], stream: true };
  if (role("tools").checked) body.tools = [WEATHER_TOOL];

  const controller = new AbortController();
  run.controller = controller;
  busy(true);
  role("pg-status").textContent = t("pg.streaming");
  try {
    const response = await fetch("/v1/chat/completions", {
      method: "POST",
      headers,
      body: JSON.stringify(body),
      signal: controller.signal,
      cache: "no-store",
    });
    if (!response.ok) {
      role("pg-error").textContent = await errorText(response);
      role("pg-status").textContent = "";
      return;
    }
    const applied = response.headers.get("x-thinking-level-applied");
    const provider = response.headers.get("x-thinking-provider");
    if (applied && provider) {
      role("pg-status").textContent = `${t("pg.streaming")} ${t("pg.applied", applied, provider, response.headers.get("x-thinking-method"))}`;
    }
    for await (const { event: kind, data } of readEvents(response, controller.signal)) {
      if (data === "[DONE]") break;
      let parsed;
      try {
        parsed = JSON.parse(data);
      } catch (_) {
        continue;
      }
      if (kind === "trace" && parsed.trace) onTrace(parsed.trace);
      else onChunk(parsed);
    }
  } catch (err) {
    if (controller.signal.aborted) role("pg-status").textContent = t("pg.stopped");
    else role("pg-error").textContent = String(err && err.message ? err.message : err);
  } finally {
    if (run.thinkingSince !== null) endThinking();
    if (run.hidden && !run.sawReasoning && run.thoughtMs !== null) role("reasoning").textContent = t("pg.hidden");
    run.controller = null;
    busy(false);
  }
}

export function initPlayground() {
  role("playground-form").addEventListener("submit", send);
  role("stop").addEventListener("click", () => run.controller && run.controller.abort());
  role("prompt").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) role("playground-form").requestSubmit();
  });
  onLangChange(thinkingBlock);
}
