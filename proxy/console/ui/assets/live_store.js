// The requests the live view holds, newest first, at most `history` of them. When full, the
// request evicted is the oldest of the session holding the most rows: a flood of requests from one
// agent session (hundreds a minute) pushes out its own older rows, never everyone else's.

import { sessionOf } from "./facts.js";

export class LiveStore {
  constructor(history = 200) {
    this.history = history;
    this.entries = new Map(); // id -> summary
    this.order = []; // ids, newest first
  }

  get(id) {
    return this.entries.get(id);
  }

  get size() {
    return this.order.length;
  }

  // Newest first.
  *list() {
    for (const id of this.order) yield this.entries.get(id);
  }

  // A listing of the newest requests (newest first), from the proxy. A request the page holds as
  // in flight that the listing does not have ended while the page was not reading: it is dropped
  // (its end is not coming any more).
  merge(listing, history) {
    if (Number.isInteger(history) && history > 0) this.history = history;
    const listed = new Set(listing.map((entry) => entry?.id));
    for (const id of [...this.order]) {
      if (this.entries.get(id).in_flight && !listed.has(id)) this.remove(id);
    }
    for (const entry of [...listing].reverse()) this.upsert(entry);
    while (this.order.length > this.history) this.evictOne();
  }

  remove(id) {
    const at = this.order.indexOf(id);
    if (at >= 0) this.order.splice(at, 1);
    this.entries.delete(id);
  }

  upsert(entry) {
    if (!entry || typeof entry.id !== "string") return;
    const known = this.entries.get(entry.id);
    // A finished summary is never replaced by a late progress update.
    if (known && !known.in_flight && entry.in_flight) return;
    this.entries.set(entry.id, entry);
    if (known) return;
    const started = entry.started_at ?? 0;
    // Usually the newest: found from the front.
    let at = 0;
    while (at < this.order.length && (this.entries.get(this.order[at]).started_at ?? 0) > started) at += 1;
    this.order.splice(at, 0, entry.id);
    while (this.order.length > this.history) this.evictOne();
  }

  evictOne() {
    // Rows per session (a request without one is a session of its own), and each one's oldest.
    const rows = new Map();
    const oldest = new Map();
    for (let i = this.order.length - 1; i >= 0; i -= 1) {
      const id = this.order[i];
      const key = sessionOf(this.entries.get(id)) ?? `request:${id}`;
      rows.set(key, (rows.get(key) ?? 0) + 1);
      if (!oldest.has(key)) oldest.set(key, i);
    }
    let victim = this.order.length - 1;
    let most = 0;
    for (const [key, n] of rows) {
      // The largest session; between equals, the one whose oldest row is older.
      if (n > most || (n === most && oldest.get(key) > victim)) {
        most = n;
        victim = oldest.get(key);
      }
    }
    const [id] = this.order.splice(victim, 1);
    this.entries.delete(id);
  }
}
