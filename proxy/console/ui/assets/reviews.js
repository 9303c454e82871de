// Pending tool-call reviews (THINKPROXY_REVIEW_TOOLS): a card per held call with approve / edit /
// reject and a comment. Needs a reviewer key (kept in this page's memory only); the list is read
// from GET /thinkproxy/reviews every two seconds while the panel is open, decisions are posted to
// POST /thinkproxy/reviews/{id}. Every string from the server is rendered as text, never HTML.

import { clear, h, role } from "./dom.js";
import { onLangChange, t } from "./i18n.js";

const POLL_MS = 2000;
const state = { key: null, timer: null, cards: new Map(), opened: new Map() };

function headers() {
  return { Authorization: `Bearer ${state.key}`, "Content-Type": "application/json" };
}

function setStatus(text) {
  role("reviews-status").textContent = text;
}

async function load() {
  if (!state.key) return;
  let response;
  try {
    response = await fetch("/thinkproxy/reviews", { headers: headers() });
  } catch {
    setStatus(t("rv.offline"));
    return;
  }
  if (response.status === 401 || response.status === 403) {
    state.key = null;
    role("reviewer-auth").hidden = false;
    role("reviewer-error").textContent = t("rv.refused");
    stop();
    return;
  }
  if (response.status === 404) {
    setStatus(t("rv.off"));
    return;
  }
  const body = await response.json();
  render(Array.isArray(body.data) ? body.data : []);
}

function render(pending) {
  const list = role("reviews");
  const seen = new Set();
  for (const review of pending) {
    if (typeof review.id !== "string") continue;
    seen.add(review.id);
    if (!state.cards.has(review.id)) {
      const card = card_(review);
      state.cards.set(review.id, card);
      list.append(card);
    }
  }
  for (const [id, card] of state.cards) {
    if (!seen.has(id)) {
      card.remove();
      state.cards.delete(id);
    }
  }
  role("reviews-empty").hidden = state.cards.size > 0;
  setStatus(t("rv.count", state.cards.size));
}

function seconds(epochS) {
  return Math.max(0, Math.round(epochS - Date.now() / 1000));
}

function card_(review) {
  const args = h("textarea", { "data-role": "review-arguments", rows: 6, spellcheck: "false", hidden: true });
  const comment = h("input", { "data-role": "review-comment", placeholder: t("rv.comment") });
  const error = h("p", { class: "error", "data-role": "review-error" });
  const expires = h("span", { class: "muted" }, t("rv.expires", seconds(review.expires)));
  const card = h(
    "article",
    { class: "review", "data-role": "review", "data-review-id": review.id },
    h("header", {}, h("strong", {}, String(review.tool ?? "")), " ", expires),
    h("p", { class: "summary" }, String(review.summary ?? "")),
    h("p", { class: "muted" }, [review.model, review.provider].filter(Boolean).join(" · ")),
    args,
    comment,
    h(
      "div",
      { class: "actions" },
      h("button", { type: "button", class: "primary", "data-role": "review-approve" }, t("rv.approve")),
      h("button", { type: "button", "data-role": "review-edit" }, t("rv.edit")),
      h("button", { type: "button", "data-role": "review-modify", hidden: true }, t("rv.send_edit")),
      h("button", { type: "button", class: "danger", "data-role": "review-reject" }, t("rv.reject")),
    ),
    error,
  );
  const tick = setInterval(() => {
    if (!card.isConnected) clearInterval(tick);
    else expires.textContent = t("rv.expires", seconds(review.expires));
  }, 1000);
  card.querySelector('[data-role="review-approve"]').addEventListener("click", () => decide(card, { decision: "approve" }));
  card.querySelector('[data-role="review-reject"]').addEventListener("click", () =>
    decide(card, { decision: "reject", ...(comment.value ? { comment: comment.value } : {}) }),
  );
  card.querySelector('[data-role="review-edit"]').addEventListener("click", async () => {
    // The full arguments are fetched only when a reviewer asks to edit them.
    const response = await fetch(`/thinkproxy/reviews/${encodeURIComponent(review.id)}`, { headers: headers() });
    if (!response.ok) {
      error.textContent = t("rv.gone");
      return;
    }
    const detail = await response.json();
    let text = String(detail.arguments ?? "");
    try {
      text = JSON.stringify(JSON.parse(text), null, 2);
    } catch {
      // not JSON as the model wrote it: shown as it came, the reviewer fixes it
    }
    args.value = text;
    args.hidden = false;
    card.querySelector('[data-role="review-modify"]').hidden = false;
  });
  card.querySelector('[data-role="review-modify"]').addEventListener("click", () => {
    let parsed;
    try {
      parsed = JSON.parse(args.value);
    } catch {
      error.textContent = t("rv.bad_json");
      return;
    }
    if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed)) {
      error.textContent = t("rv.bad_json");
      return;
    }
    decide(card, { decision: "modify", arguments: parsed });
  });
  return card;
}

async function decide(card, body) {
  const error = card.querySelector('[data-role="review-error"]');
  const id = card.dataset.reviewId;
  const response = await fetch(`/thinkproxy/reviews/${encodeURIComponent(id)}`, {
    method: "POST",
    headers: headers(),
    body: JSON.stringify(body),
  });
  if (response.ok) {
    card.remove();
    state.cards.delete(id);
    role("reviews-empty").hidden = state.cards.size > 0;
    setStatus(t("rv.count", state.cards.size));
    return;
  }
  let message = `${response.status}`;
  try {
    message = (await response.json()).error?.message ?? message;
  } catch {
    // keep the status
  }
  error.textContent = message;
}

function start() {
  stop();
  load();
  state.timer = setInterval(load, POLL_MS);
}

function stop() {
  if (state.timer !== null) clearInterval(state.timer);
  state.timer = null;
}

export function initReviews() {
  const form = role("reviewer-auth");
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const input = role("reviewer-key");
    state.key = input.value.trim() || null;
    input.value = "";
    role("reviewer-error").textContent = "";
    if (!state.key) return;
    form.hidden = true;
    start();
  });
  onLangChange(() => {
    for (const card of state.cards.values()) card.remove();
    state.cards.clear();
    clear(role("reviews"));
    load();
  });
}
