// The session list: every session of the token's team with its state,
// current task, iterations, tokens and age, asked for again every few
// seconds.
import {
  loadSettings, setupToken, setupTheme, getJSON, el, int, short, since,
  status, notice, explain, token, STATES, ApiError,
} from "./common.js";

const REFRESH_MS = 5000;
let timer = null;
let sessions = [];
let loaded = null;

async function refresh() {
  clearTimeout(timer);
  if (!token()) {
    notice(explain(new ApiError(401, "no token")), "info");
    status("idle", "no token");
    return;
  }
  try {
    const body = await getJSON("/sessions");
    sessions = body.sessions || [];
    loaded = Date.now();
    notice("");
    status("live", `updated ${new Date().toLocaleTimeString("en-GB", { hour12: false })}`);
    render();
  } catch (err) {
    notice(explain(err));
    status(err.status === 401 ? "refused" : "error", err.status === 401 ? "token refused" : "API unreachable");
    if (err.status === 401) return;
  }
  timer = setTimeout(refresh, REFRESH_MS);
}

function render() {
  const body = document.querySelector("#sessions tbody");
  const rows = document.createDocumentFragment();
  const counts = {};
  for (const s of sessions) {
    counts[s.state] = (counts[s.state] || 0) + 1;
    const tr = el("tr");
    tr.dataset.session = s.id;
    tr.dataset.state = s.state;
    const badge = el("td");
    badge.append(el("span", `state-badge small`, s.state));
    badge.firstChild.dataset.state = s.state;
    const link = el("a", "session-link", s.id);
    link.href = `sessions/${encodeURIComponent(s.id)}`;
    const idCell = el("td", "id");
    idCell.append(link);
    if (s.reason) idCell.append(el("div", "reason-line", s.reason));
    tr.append(
      badge,
      idCell,
      el("td", "", s.team || "–"),
      el("td", "", s.current_task || "–"),
      el("td", "num", int(s.iterations)),
      el("td", "num", short(s.tokens)),
      el("td", "num", since(s.started_at, loaded)),
      el("td", "num", `${since(s.updated_at, loaded)} ago`),
    );
    tr.addEventListener("click", (ev) => {
      if (ev.target.tagName !== "A") location.href = link.href;
    });
    rows.append(tr);
  }
  body.replaceChildren(rows);
  document.getElementById("empty").hidden = sessions.length > 0;
  const c = document.getElementById("counts");
  c.replaceChildren(...STATES.filter((s) => counts[s]).map((s) => {
    const b = el("span", "count");
    b.dataset.state = s;
    b.append(el("strong", "", counts[s]), document.createTextNode(` ${s}`));
    return b;
  }));
}

async function main() {
  setupTheme();
  setupToken(refresh);
  try {
    await loadSettings("console.json");
  } catch (err) {
    notice(err.message);
    return;
  }
  refresh();
}

main();
