// The console's entry point: language, panels (one <section data-panel> each, chosen by the URL
// hash: #live by default, #sessions, #charts, #playground, #reviews, #clients), and each panel's module. A new panel adds its section,
// its nav link and one line below.

import { initCharts } from "./charts.js";
import { initClients } from "./clients.js";
import { applyStatic, lang, setLang } from "./i18n.js";
import { initLive } from "./live.js";
import { initPlayground } from "./playground.js";
import { initReviews } from "./reviews.js";
import { initSessions } from "./sessions.js";

const PANELS = {
  live: initLive,
  sessions: initSessions,
  charts: initCharts,
  playground: initPlayground,
  reviews: initReviews,
  clients: initClients,
};

function showPanel() {
  const wanted = location.hash.replace(/^#/, "");
  const name = Object.prototype.hasOwnProperty.call(PANELS, wanted) ? wanted : "live";
  for (const section of document.querySelectorAll("section[data-panel]")) section.hidden = section.dataset.panel !== name;
  for (const link of document.querySelectorAll("[data-panel-link]")) {
    link.classList.toggle("on", link.dataset.panelLink === name);
  }
  document.body.dataset.view = name;
}

applyStatic();
document.querySelector('[data-role="lang"]').addEventListener("click", () => setLang(lang() === "zh" ? "en" : "zh"));
for (const init of Object.values(PANELS)) init();
window.addEventListener("hashchange", showPanel);
showPanel();
