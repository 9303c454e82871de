// What the console reads of one request's summary (GET /thinkproxy/requests, docs/console.md
// "The data"), in one place: the live list, its filters, the sessions view and the charts all ask
// these functions, never the summary's fields directly, so a field is named once.

import { t } from "./i18n.js";

// The front door: chat, responses, messages, or websocket (Responses over a WebSocket); null for a
// passthrough route (/v1/models, embeddings, …), which is listed with its method and path.
export function doorOf(entry) {
  if (typeof entry.door === "string") return entry.door === "passthrough" ? null : entry.door;
  if (entry.route === "passthrough" || !entry.route) return null;
  return entry.transport === "websocket" ? "websocket" : entry.route;
}

export function isModelRequest(entry) {
  return doorOf(entry) !== null;
}

// The session the request belongs to (docs/sessions.md; a request of no session is its own, with
// its own id), or null on a proxy without session accounting.
export function sessionOf(entry) {
  const id = entry.session ?? null;
  return typeof id === "string" && id ? id : null;
}

// The client program (user-agent family: codex, claude-code, openai-python, …), when known.
export function clientKindOf(entry) {
  const kind = entry.client_kind ?? null;
  return typeof kind === "string" && kind ? kind : null;
}

// The gateway client key's name (configured, never a key), or null.
export function keyOf(entry) {
  return typeof entry.client === "string" && entry.client ? entry.client : null;
}

export function modelText(entry) {
  return isModelRequest(entry) ? entry.model ?? "—" : `${entry.method} ${entry.path}`;
}

// "asked → applied", or one word when they are the same; "—" for a passthrough route.
export function levelText(entry) {
  if (!isModelRequest(entry)) return "—";
  const asked = entry.level_requested ?? "—";
  const applied = entry.level ?? "—";
  return asked === applied ? applied : `${asked} → ${applied}`;
}

// Tokens in, cached in, reasoning, out: null where the upstream reported nothing.
export function tokensOf(entry) {
  const tokens = entry.tokens;
  if (tokens && typeof tokens === "object") {
    return {
      input: count(tokens.input),
      cached: count(tokens.cached),
      reasoning: count(tokens.reasoning),
      output: count(tokens.output),
    };
  }
  const usage = entry.usage || {};
  return {
    input: count(usage.prompt_tokens),
    cached: count(usage.cached_tokens),
    reasoning: count(usage.reasoning_tokens),
    output: count(usage.completion_tokens),
  };
}

export function reasoningEstimated(entry) {
  return (entry.tokens?.reasoning_source ?? entry.usage?.reasoning_tokens_source) === "estimated";
}

// How long the model thought: null (shown "—", never "0 ms") when the answer was not streamed,
// since the proxy then sees the reasoning all at once and cannot time it.
// So is a span of 0 when the model reasoned not at all (0 reasoning tokens): there was no thinking
// to time.
export function thinkingMs(entry) {
  let value;
  if ("thinking_ms" in entry) value = entry.thinking_ms;
  else value = entry.stream === false ? null : entry.reasoning_ms;
  return spanOrNull(value, tokensOf(entry).reasoning);
}

export function spanOrNull(value, reasoningTokens) {
  if (typeof value !== "number") return null;
  return value === 0 && reasoningTokens === 0 ? null : value;
}

export function costOf(entry) {
  return typeof entry.cost_usd === "number" ? entry.cost_usd : null;
}

// ok | error | in_flight
export function outcomeOf(entry) {
  if (entry.in_flight) return "in_flight";
  return entry.status >= 200 && entry.status < 300 && !entry.error ? "ok" : "error";
}

export function doorText(entry) {
  const door = doorOf(entry);
  return door === null ? t("live.passthrough") : t(`door.${door}`);
}

function count(value) {
  return Number.isInteger(value) && value >= 0 ? value : null;
}

// The sum of a list of numbers that may be null: null when every one is.
export function sum(values) {
  let total = null;
  for (const value of values) if (typeof value === "number") total = (total ?? 0) + value;
  return total;
}

export function tokenText(value) {
  return value === null || value === undefined ? "—" : value.toLocaleString("en-US");
}

// A ratio (0.788) as a percentage ("78.8%"; whole at 0 and from 99.5%), "—" when unknown.
export function percent(ratio) {
  return typeof ratio === "number" ? `${(ratio * 100).toFixed(ratio >= 0.995 || ratio === 0 ? 0 : 1)}%` : "—";
}
