// A session's live page: the summary from GET /sessions/{id}, then every
// event of the session from GET /sessions/{id}/events, from the first one
// on and live, folded into the model (model.js) and drawn at most once a
// frame. A finished session replays; a running one keeps updating, and a
// dropped stream is picked up again after the last event it gave.
import {
  loadSettings, setupToken, setupTheme, getJSON, streamEvents, el, int, short, money,
  duration, clock, status, notice, explain, token, ApiError,
} from "./common.js";
import { newModel, apply, overlay } from "./model.js";
import { drawChart } from "./chart.js";

const SUMMARY_MS = 5000;
const RETRY_MS = 2000;
const MAX_ENTRIES = 600;
const ROLES = ["builder", "critic", "pruner", "decomposer", "summarizer"];
const RESPONSE_TEXT = {
  nudge: "nudged the model and went on",
  prune: "pruned the context",
  decompose: "split the task into subtasks",
  escalate: "escalated to a person",
  fail: "failed the session (a limit)",
  cancel: "the session was cancelled",
};

const id = decodeURIComponent(location.pathname.split("/").filter(Boolean).pop() || "");
let model = newModel(id);
let run = null; // the AbortController of the current load
let frame = 0;
let drawn = new Map(); // entry -> its <li>
let prices = {}; // by role, per million tokens (console.json)

function schedule() {
  if (!frame) frame = requestAnimationFrame(draw);
}

// reset forgets what the page showed, to fold the events again.
function reset() {
  const summary = model.summary;
  model = newModel(id);
  if (summary) overlay(model, summary);
  drawn = new Map();
  document.getElementById("activity").replaceChildren();
  schedule();
}

async function start() {
  if (run) run.abort();
  run = new AbortController();
  const { signal } = run;
  model = newModel(id);
  reset();
  if (!token()) {
    notice(explain(new ApiError(401, "no token")), "info");
    status("idle", "no token");
    return;
  }
  notice("");
  status("connecting", "connecting…");
  try {
    overlay(model, await getJSON(`/sessions/${encodeURIComponent(id)}`, signal));
    schedule();
  } catch (err) {
    if (signal.aborted) return;
    fail(err);
    if (err instanceof ApiError && (err.status === 401 || err.status === 404)) return;
  }
  planSummary(signal, SUMMARY_MS);
  follow(signal);
}

function fail(err) {
  notice(explain(err));
  const refused = err instanceof ApiError && err.status === 401;
  status(refused ? "refused" : "error", refused ? "token refused" : err.status === 404 ? "not found" : "API unreachable");
}

// follow reads the event stream until the page goes, reconnecting after
// the last event seen when the stream drops.
async function follow(signal) {
  for (;;) {
    // From the last event seen, which apply() then skips: whether the
    // server counts from_seq in or out, no event is lost or shown twice.
    const from = model.lastSeq ? `?from_seq=${model.lastSeq}` : "";
    if (!model.lastSeq && model.events) {
      // A stream without sequence ids starts over from the first event.
      reset();
    }
    let ended = false;
    try {
      await streamEvents(`/sessions/${encodeURIComponent(id)}/events${from}`, signal,
        () => {
          notice("");
          status("live", "live");
        },
        (msg) => {
          let env;
          try {
            env = JSON.parse(msg.data);
          } catch {
            return; // not an event: nothing to show
          }
          const was = model.state;
          if (!apply(model, env, Number(msg.id) || 0)) return;
          schedule();
          // The session started, ended or was resumed: the summary's
          // figures (usage by role) are worth having at once.
          if (model.state !== was) planSummary(signal, 300);
        });
      ended = true;
    } catch (err) {
      if (signal.aborted) return;
      if (err instanceof ApiError && (err.status === 401 || err.status === 404)) {
        fail(err);
        return;
      }
    }
    if (signal.aborted) return;
    status("error", "reconnecting…");
    // A stream the server ended (a proxy's timeout) is asked for again at
    // once; a failed call after a pause.
    await new Promise((r) => setTimeout(r, ended ? 250 : RETRY_MS));
    if (signal.aborted) return;
  }
}

// planSummary asks for the summary again after delay ms: every few seconds
// while the session runs (the usage of the roles whose calls the events do
// not carry), and once when it ends, for the final figures.
let summaryTimer = 0;

function planSummary(signal, delay) {
  clearTimeout(summaryTimer);
  summaryTimer = setTimeout(async () => {
    if (signal.aborted) return;
    try {
      overlay(model, await getJSON(`/sessions/${encodeURIComponent(id)}`, signal));
      schedule();
    } catch {
      // The stream says what is wrong with the connection.
    }
    if (!signal.aborted && (!model.state || model.state === "running")) planSummary(signal, SUMMARY_MS);
  }, delay);
}

function draw() {
  frame = 0;
  const m = model;
  document.title = `${m.state || "…"} · ${id} · Ralph mesh`;
  document.body.dataset.state = m.state;
  document.body.dataset.events = m.events;
  document.body.dataset.lastSeq = m.lastSeq;
  document.getElementById("session-id").textContent = id;
  drawHeadline(m);
  drawChart(document.getElementById("chart"), m);
  drawTasks(m);
  drawUsage(m);
  drawActivity(m);
}

function drawHeadline(m) {
  const s = m.summary || {};
  const st = document.getElementById("state");
  st.textContent = m.state || s.state || "…";
  st.dataset.state = m.state || s.state || "";
  const cur = m.current || s.current_task || "";
  const t = m.tasks.get(cur);
  document.getElementById("current-task").textContent = cur ? `${cur}${t && t.title ? ` · ${t.title}` : ""}` : "–";
  document.getElementById("iterations").textContent = int(Math.max(m.iteration, s.iterations || 0));
  document.getElementById("tokens").textContent = short(Math.max(m.tokens, s.tokens || 0));
  const lastPoint = m.points[m.points.length - 1];
  document.getElementById("context").textContent = lastPoint
    ? `${short(lastPoint.tokens)}${m.limits.context_window ? ` / ${short(m.limits.context_window)}` : ""}`
    : "–";
  document.getElementById("compactions").textContent = m.drops.filter((d) => d.kind === "compaction" && !d.error && d.after < d.before).length;
  document.getElementById("signals").textContent = m.signals.length;
  document.getElementById("team").textContent = s.team || "–";
  drawAge(m);
  const reason = document.getElementById("reason");
  reason.textContent = m.reason || s.reason || "";
  reason.hidden = !reason.textContent;
}

function drawAge(m) {
  const s = m.summary || {};
  const started = Date.parse(m.startedAt || s.started_at || "");
  const label = document.querySelector("#age").previousElementSibling;
  if (Number.isNaN(started)) return;
  if (m.state && m.state !== "running") {
    label.textContent = "Took";
    document.getElementById("age").textContent = duration(Date.parse(m.updatedAt || s.updated_at) - started);
  } else {
    label.textContent = "Running for";
    document.getElementById("age").textContent = duration(Date.now() - started);
  }
}

const STATUS_ICON = { pending: "○", active: "▶", review: "◎", decomposed: "⑂", done: "✔" };

function drawTasks(m) {
  const node = (tid) => {
    const t = m.tasks.get(tid);
    const li = el("li", `task status-${t.status}${tid === m.current ? " current" : ""}`);
    li.dataset.taskId = t.id;
    li.dataset.status = t.status;
    li.dataset.parent = t.parent || "";
    const row = el("div", "task-row");
    row.append(el("span", "task-icon", STATUS_ICON[t.status] || "·"), el("span", "task-id", t.id), el("span", "task-title", t.title));
    const meta = [];
    if (t.iterations) meta.push(`${t.iterations} it.`);
    if (t.turns) meta.push(`${t.turns} turns`);
    if (t.attempts) meta.push(`${t.attempts} review${t.attempts === 1 ? "" : "s"}`);
    row.append(el("span", "task-meta", meta.join(" · ")));
    li.append(row);
    if (t.children.length) {
      const ul = el("ul", "subtasks");
      for (const c of t.children) ul.append(node(c));
      li.append(ul);
    }
    return li;
  };
  document.getElementById("tasks").replaceChildren(...m.roots.filter((r) => m.tasks.has(r)).map(node));
}

function drawUsage(m) {
  const priced = Object.keys(prices).length > 0;
  // The builder's usage is in the events too, and they are newer than a
  // summary asked for a moment ago.
  const usage = { ...((m.summary && m.summary.usage) || {}) };
  if (!usage.builder || (usage.builder.calls || 0) < m.builder.calls) usage.builder = m.builder;
  const roles = [...ROLES.filter((r) => usage[r]), ...Object.keys(usage).filter((r) => !ROLES.includes(r)).sort()];
  const total = { calls: 0, input: 0, output: 0, cost: 0, costed: false };
  const rows = roles.map((role) => {
    const u = usage[role] || {};
    const tr = el("tr");
    tr.dataset.role = role;
    tr.dataset.calls = u.calls || 0;
    tr.dataset.input = u.input_tokens || 0;
    tr.dataset.output = u.output_tokens || 0;
    total.calls += u.calls || 0;
    total.input += u.input_tokens || 0;
    total.output += u.output_tokens || 0;
    let cost = "–";
    const p = prices[role];
    if (p) {
      const c = ((u.input_tokens || 0) * p.input + (u.output_tokens || 0) * p.output) / 1e6;
      total.cost += c;
      total.costed = true;
      cost = money(c);
      tr.dataset.cost = c;
    }
    tr.append(el("td", "role", role), el("td", "num", int(u.calls)), el("td", "num", short(u.input_tokens)),
      el("td", "num", short(u.output_tokens)), el("td", "num cost", cost));
    return tr;
  });
  const table = document.getElementById("usage");
  table.classList.toggle("priced", priced);
  table.tBodies[0].replaceChildren(...rows);
  const foot = el("tr", "total");
  foot.append(el("td", "role", "total"), el("td", "num", int(total.calls)), el("td", "num", short(total.input)),
    el("td", "num", short(total.output)), el("td", "num cost", total.costed ? money(total.cost) : "–"));
  table.tFoot.replaceChildren(foot);
  document.getElementById("usage-hint").textContent = m.summary && m.summary.usage
    ? (priced ? "cost in the configured prices per million tokens" : "no prices configured (RALPH_CONSOLE_PRICES): tokens only")
    : "builder only, from the events: the summary with every role's usage is not loaded";
}

function drawActivity(m) {
  const list = document.getElementById("activity");
  const fresh = [];
  for (const e of m.touched) {
    const li = entryNode(e);
    const old = drawn.get(e);
    drawn.set(e, li);
    if (old) old.replaceWith(li);
    else fresh.push(li);
  }
  m.touched.clear();
  // Newest first: entries are folded oldest first.
  fresh.reverse();
  list.prepend(...fresh);
  while (list.children.length > MAX_ENTRIES) list.lastElementChild.remove();
}

function entryNode(e) {
  const li = el("li", `entry kind-${e.kind}${e.error ? " error" : ""}`);
  li.dataset.kind = e.kind;
  li.dataset.step = e.step;
  if (e.task) li.dataset.task = e.task;
  const head = el("div", "entry-head");
  head.append(el("time", "when", clock(e.time)));
  switch (e.kind) {
    case "iteration": {
      li.dataset.iteration = e.iteration;
      head.append(el("span", "tag", `#${e.iteration}`), el("span", "task-id", e.task),
        el("span", "meta", `context ${short(e.context)} · in ${short(e.usage.input_tokens)} / out ${short(e.usage.output_tokens)}`));
      li.append(head);
      if (e.text) li.append(el("p", "say", e.text));
      if (e.calls.length) {
        const ul = el("ul", "calls");
        for (const c of e.calls) {
          const ci = el("li", c.failed ? "call failed" : "call");
          ci.dataset.tool = c.name;
          ci.append(el("span", "tool", c.name), el("span", "args", c.args), el("span", "result", `→ ${c.status}`));
          ul.append(ci);
        }
        li.append(ul);
      }
      if (e.tests) li.append(el("p", "detail", `tests: ${e.tests.passed} passed, ${e.tests.failed} failed`));
      if (e.claimedDone) li.append(el("p", "done-claim", "says the task is done"));
      return li;
    }
    case "stuck": {
      const s = e.signal;
      li.dataset.iteration = s.iteration;
      li.dataset.pattern = s.pattern;
      li.dataset.response = s.response || "";
      head.append(el("span", "tag warn", "stuck"), el("span", "task-id", e.task),
        el("strong", "", `${s.pattern} at #${s.iteration}`),
        el("span", "meta", `${s.strength || "?"} evidence · confidence ${Number(s.confidence).toFixed(2)} · recommends ${s.action}`));
      li.append(head, el("p", "diagnosis", s.diagnosis));
      const did = el("p", "response");
      did.append(el("span", "label", "builder: "), el("span", "", s.response ? (RESPONSE_TEXT[s.response] || s.response) : "deciding…"));
      li.append(did);
      return li;
    }
    case "verdict": {
      li.classList.add(e.approved ? "approved" : "rejected");
      head.append(el("span", `tag ${e.approved ? "ok" : "bad"}`, e.approved ? "✔ approved" : "✘ changes"), el("strong", "", e.text));
      li.append(head);
      if (e.detail) li.append(el("p", "feedback", e.detail));
      if (e.items.length) {
        const ul = el("ul", "unmet");
        for (const c of e.items) ul.append(el("li", "", c));
        li.append(ul);
      }
      if (e.verify) {
        const v = e.verify;
        li.append(el("p", "detail mono", `verify: ${v.command} → exit ${v.exit_code}${v.timed_out ? " (timed out)" : ""}`));
      }
      return li;
    }
    default: {
      const tags = {
        compaction: "compact", prune: "prune", decompose: "split", "decompose-request": "split", "prune-request": "prune",
        task: "task", "task-done": "task", review: "review", session: "session", end: "session", memory: "memory", other: "event",
      };
      head.append(el("span", `tag t-${e.kind}`, tags[e.kind] || e.kind));
      // Only where the text does not name the task already.
      if (e.task && ["compaction", "prune", "other"].includes(e.kind)) head.append(el("span", "task-id", e.task));
      head.append(el("strong", "", e.text));
      li.append(head);
      if (e.kind === "end") li.dataset.state = e.state;
      if (e.detail) li.append(el("p", "detail", e.detail));
      if (e.items && e.items.length) {
        const ul = el("ul", "items");
        for (const c of e.items) ul.append(el("li", "", c));
        li.append(ul);
      }
      return li;
    }
  }
}

async function main() {
  setupTheme();
  setupToken(start);
  document.getElementById("session-id").textContent = id;
  try {
    ({ prices } = await loadSettings("../console.json"));
  } catch (err) {
    notice(err.message);
    return;
  }
  setInterval(() => drawAge(model), 1000);
  start();
}

main();
