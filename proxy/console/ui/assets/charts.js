// The Charts view: what the operator asks at a glance, from GET /thinkproxy/stats (the proxy's own
// figures, docs/sessions.md): requests and tokens over time by level, the cache-hit ratio over
// time (time series, drawn with the vendored uPlot: assets/vendor), and as bars the share of
// output spent thinking per model and level, TTFT and total-time percentiles, cost by key and
// by model. Read every ten seconds while the panel is open.

import { clear, h, role } from "./dom.js";
import { percent } from "./facts.js";
import { ms, onLangChange, t, usd } from "./i18n.js";
import { getJSON, pollWhileOpen } from "./poll.js";

const POLL_MS = 10000;
// The range shown: how far back, and the bucket the proxy sums over.
const RANGES = { "15m": [15 * 60, 30], "1h": [3600, 60], "6h": [6 * 3600, 300], "24h": [24 * 3600, 900] };
const LEVEL_KEYS = ["off", "standard", "deep", "default"];
const TOKEN_KEYS = ["input", "cached", "reasoning", "output"];
const state = { stats: null, problem: null, range: "1h", plots: [] };

function css(name) {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
}

function seriesColor(index) {
  return css(`--series-${(index % 6) + 1}`);
}

function levelColor(level) {
  return level === "default" ? css("--series-2") : css(`--level-${level}`);
}

// 1,200 -> "1.2k", 3,400,000 -> "3.4M": axis labels that fit.
function compact(value) {
  const abs = Math.abs(value);
  if (abs >= 1e6) return `${+(value / 1e6).toFixed(1)}M`;
  if (abs >= 1e3) return `${+(value / 1e3).toFixed(1)}k`;
  return String(+value.toFixed(2));
}

// One uPlot time chart into `box`: xs in Unix seconds, each series {label, values, color}.
// The x axis spans the range asked for (`span`, Unix seconds), not only the buckets that have
// requests: one bucket alone would otherwise be drawn on an axis of years.
function timeChart(box, xs, series, { percentAxis = false, span = null } = {}) {
  const ink = css("--muted");
  const grid = css("--line");
  const axis = { stroke: ink, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid, width: 1 } };
  const label = percentAxis ? (v) => `${Math.round(v * 100)}%` : compact;
  const yAxis = { ...axis, size: 56, values: (u, ticks) => ticks.map(label) };
  const options = {
    width: Math.max(280, box.clientWidth - 8),
    height: 200,
    series: [
      {},
      ...series.map((s) => ({
        label: s.label,
        stroke: s.color,
        width: 2,
        dash: s.dash,
        fill: null,
        points: { show: xs.length < 40, size: 6 },
      })),
    ],
    axes: [axis, yAxis],
    scales: {
      ...(span ? { x: { time: true, range: () => span } } : {}),
      // Counts from zero (a lone value is not the axis' floor); ratios from 0 to 100%.
      y: { range: percentAxis ? [0, 1] : (u, min, max) => [0, max > 0 ? max * 1.1 : 1] },
    },
    legend: { live: false },
    cursor: { drag: { x: false, y: false } },
  };
  state.plots.push(new window.uPlot(options, [xs, ...series.map((s) => s.values)], box));
}

function chartBox(name, title, total) {
  const box = h("div", { class: "chart-plot" });
  const card = h(
    "figure",
    { class: "chart", "data-role": "chart", "data-chart": name, "data-total": total === undefined ? null : String(total) },
    h("figcaption", {}, title),
    box,
  );
  return { card, box };
}

// Horizontal bars: rows of {label, value, text}, widths against the largest (or 1 for ratios).
function barChart(name, title, rows, { ratio = false } = {}) {
  const largest = ratio ? 1 : Math.max(0, ...rows.map((r) => r.value ?? 0));
  const card = h("figure", { class: "chart bars", "data-role": "chart", "data-chart": name }, h("figcaption", {}, title));
  if (!rows.length) card.append(h("p", { class: "muted" }, t("ch.nodata")));
  for (const [index, row] of rows.entries()) {
    const width = largest > 0 && row.value ? Math.max(1, Math.round((row.value / largest) * 100)) : 0;
    const bar = h("span", { class: "bar-fill" });
    bar.style.width = `${width}%`;
    bar.style.background = row.color ?? seriesColor(index);
    card.append(
      h(
        "div",
        { class: "bar-row", "data-role": "bar", "data-label": row.label },
        h("span", { class: "bar-label", title: row.label }, row.label),
        h("span", { class: "bar-track" }, bar),
        h("span", { class: "bar-value" }, row.text),
      ),
    );
  }
  return card;
}

function render() {
  for (const plot of state.plots) plot.destroy();
  state.plots = [];
  const grid = role("charts");
  clear(grid);
  const status = role("charts-status");
  role("charts-off").hidden = state.problem !== "off";
  status.textContent = state.problem === "offline" ? t("ch.offline") : "";
  const stats = state.stats;
  if (!stats || state.problem) return;
  status.textContent = t("ch.summary", stats.requests ?? 0, percent(stats.cache_hit_ratio));
  const buckets = stats.buckets || [];
  const xs = buckets.map((b) => b.at / 1000);
  const span = Number.isFinite(stats.since) && Number.isFinite(stats.until) ? [stats.since / 1000, stats.until / 1000] : null;

  const requests = chartBox("requests", t("ch.requests"), stats.requests ?? 0);
  const tokens = chartBox("tokens", t("ch.tokens"));
  const byLevelTokens = chartBox("tokens-level", t("ch.tokens_level"));
  const cache = chartBox("cache", t("ch.cache"));
  grid.append(requests.card, byLevelTokens.card, tokens.card, cache.card);
  const byLevel = LEVEL_KEYS.filter((level) => buckets.some((b) => (b.requests?.[level] ?? 0) > 0));
  timeChart(
    requests.box,
    xs,
    byLevel.map((level) => ({
      label: t(level === "default" ? "ss.level.default" : `level.${level}`),
      values: buckets.map((b) => b.requests?.[level] ?? 0),
      color: levelColor(level),
    })),
    { span },
  );
  timeChart(
    tokens.box,
    xs,
    TOKEN_KEYS.map((key, index) => ({ label: t(`col.${key === "input" ? "in" : key === "output" ? "out" : key}`), values: buckets.map((b) => b.tokens?.[key] ?? null), color: seriesColor(index) })),
    { span },
  );
  // Output per level, and (dashed) the reasoning part of it.
  const levelLabel = (level) => t(level === "default" ? "ss.level.default" : `level.${level}`);
  const outputLevels = LEVEL_KEYS.filter((level) => buckets.some((b) => (b.output_by_level?.[level] ?? 0) > 0));
  timeChart(
    byLevelTokens.box,
    xs,
    outputLevels.flatMap((level) => [
      { label: `${levelLabel(level)} · ${t("col.out")}`, values: buckets.map((b) => b.output_by_level?.[level] ?? 0), color: levelColor(level) },
      {
        label: `${levelLabel(level)} · ${t("col.reasoning")}`,
        values: buckets.map((b) => b.reasoning_by_level?.[level] ?? 0),
        color: levelColor(level),
        dash: [6, 4],
      },
    ]),
    { span },
  );
  timeChart(
    cache.box,
    xs,
    [{ label: t("ch.cache_ratio"), values: buckets.map((b) => b.cache_hit_ratio ?? null), color: css("--ok") }],
    { percentAxis: true, span },
  );

  const share = (stats.reasoning_share || []).map((row) => ({
    label: `${row.model} · ${row.level ?? t("ss.level.default")}`,
    value: row.share,
    text: `${percent(row.share)} (${row.reasoning}/${row.output})`,
    color: levelColor(row.level ?? "default"),
  }));
  grid.append(barChart("share", t("ch.share"), share, { ratio: true }));

  const latency = stats.latency || {};
  const percentiles = [];
  for (const [name, label] of [["ttft_ms", "ch.ttft"], ["total_ms", "ch.total"]]) {
    for (const p of ["p50", "p95", "p99"]) {
      const value = latency[name]?.[p];
      const color = css(name === "ttft_ms" ? "--series-1" : "--series-5");
      percentiles.push({ label: `${t(label)} ${p}`, value: value ?? 0, text: ms(value), color });
    }
  }
  grid.append(barChart("latency", t("ch.latency"), percentiles));

  const cost = stats.cost || {};
  const costRows = [
    ...(cost.by_key || []).map((r) => ({ label: `${t("ch.key")} ${r.key ?? t("ch.nokey")}`, value: r.cost_usd, text: usd(r.cost_usd) })),
    ...(cost.by_model || []).map((r) => ({ label: `${t("ch.model")} ${r.model}`, value: r.cost_usd, text: usd(r.cost_usd) })),
  ];
  grid.append(barChart("cost", t("ch.cost"), costRows));
}

async function load() {
  const [seconds, bucket] = RANGES[state.range];
  const since = Date.now() - seconds * 1000;
  const { status, body } = await getJSON(`/thinkproxy/stats?since=${since}&bucket=${bucket}`);
  if (status === 401) return false;
  if (status === 404) {
    state.problem = "off";
    state.stats = null;
  } else if (status === 200 && body) {
    state.problem = null;
    state.stats = body;
  } else {
    state.problem = "offline";
  }
  render();
  return true;
}

export function initCharts() {
  const poll = pollWhileOpen("charts", load, POLL_MS, "charts-auth", "charts-key");
  const select = role("charts-range");
  select.addEventListener("change", () => {
    state.range = Object.hasOwn(RANGES, select.value) ? select.value : "1h";
    poll.refresh();
  });
  onLangChange(render);
  // Colours follow dark mode; widths follow the window.
  window.matchMedia("(prefers-color-scheme: dark)").addEventListener("change", render);
  window.addEventListener("resize", () => {
    if (location.hash === "#charts") render();
  });
}
