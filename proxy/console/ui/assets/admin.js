// The admin key (THINKPROXY_ADMIN_KEYS) the proxy's live data asks for in gateway mode, in this
// page's memory only (never stored), shared by the panels that read that data: entered in one,
// it serves the others.

let key = null;

export function adminKey() {
  return key;
}

const listeners = [];

export function setAdminKey(value) {
  key = value || null;
  for (const fn of listeners) fn(key);
}

// Called with the new key whenever one is entered (a panel that stopped at a 401 starts again).
export function onAdminKey(fn) {
  listeners.push(fn);
}

export function adminHeaders(headers = {}) {
  return key ? { ...headers, Authorization: `Bearer ${key}` } : headers;
}
