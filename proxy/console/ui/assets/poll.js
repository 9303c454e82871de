// Reading the proxy's admin JSON (GET /thinkproxy/*) for a panel, every few seconds while that
// panel is open. In gateway mode a 401 shows the panel's admin-key form; the key entered there is
// the one the other panels use (admin.js).

import { adminHeaders, setAdminKey } from "./admin.js";
import { role } from "./dom.js";

// {status, body}: status 0 when the proxy did not answer; body null unless it answered JSON.
export async function getJSON(url) {
  let response;
  try {
    response = await fetch(url, { headers: adminHeaders({ Accept: "application/json" }), cache: "no-store" });
  } catch {
    return { status: 0, body: null };
  }
  let body = null;
  try {
    body = await response.json();
  } catch {
    // not JSON
  }
  return { status: response.status, body };
}

// Calls `load` at once and every `everyMs` while location.hash is `#panel`; `load` returns false
// when the proxy asked for an admin key (the polling stops until one is entered in `authForm`).
export function pollWhileOpen(panel, load, everyMs, authForm, keyInput) {
  let timer = null;
  const stop = () => {
    if (timer) clearInterval(timer);
    timer = null;
  };
  const tick = async () => {
    const ok = await load();
    role(authForm).hidden = ok !== false;
    if (ok === false) stop();
  };
  const start = () => {
    stop();
    tick();
    timer = setInterval(tick, everyMs);
  };
  const follow = () => (location.hash === `#${panel}` ? start() : stop());
  role(authForm).addEventListener("submit", (e) => {
    e.preventDefault();
    const input = role(keyInput);
    setAdminKey(input.value.trim());
    input.value = "";
    start();
  });
  window.addEventListener("hashchange", follow);
  follow();
  return { refresh: tick };
}
