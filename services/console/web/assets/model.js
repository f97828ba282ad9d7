// The session as its events tell it: apply() folds one event envelope
// (pkg/events.Envelope, in stream order) into the model, with no DOM and no
// clock, so a finished session replayed from the start and a running one
// followed live end in the same place. The page draws from the model; the
// summary the API gives (usage by role, the task table, the team) is laid
// over it with overlay().

// RESPONSES name what the builder did about a stuck signal, by the event
// it published next.
const RESPONSES = {
  "iteration.requested": "nudge",
  "prune.requested": "prune",
  "decompose.requested": "decompose",
  "session.escalated": "escalate",
  "session.failed": "fail",
  "session.cancelled": "cancel",
};

const TERMINAL = {
  "session.completed": "completed",
  "session.failed": "failed",
  "session.escalated": "escalated",
  "session.cancelled": "cancelled",
};

export function newModel(id) {
  return {
    id,
    state: "",
    reason: "",
    workspace: "",
    startedAt: "",
    updatedAt: "",
    limits: { context_window: 0, compact_at: 0 },
    tasks: new Map(), // id -> task
    roots: [], // ids of the PRD's tasks, in order
    current: "",
    points: [], // {iteration, tokens, task, compacted}
    drops: [], // {kind: compaction|prune, iteration, before, after, error, ...}
    signals: [], // {iteration, pattern, confidence, strength, action, diagnosis, response}
    entries: [], // the activity list, oldest first
    touched: new Set(), // entries changed since the page last drew them
    iteration: 0,
    tokens: 0, // builder tokens, from the iteration records
    builder: { calls: 0, input_tokens: 0, output_tokens: 0 },
    pending: null, // the signal whose answer is the builder's next event
    events: 0,
    lastSeq: 0,
    summary: null,
  };
}

function task(m, id, fields = {}) {
  let t = m.tasks.get(id);
  if (!t) {
    t = { id, title: "", parent: "", children: [], status: "pending", depth: 0, turns: 0, attempts: 0, iterations: 0 };
    m.tasks.set(id, t);
  }
  Object.assign(t, fields);
  return t;
}

function addChild(m, parentID, childID) {
  const p = task(m, parentID);
  if (!p.children.includes(childID)) p.children.push(childID);
  task(m, childID, { parent: parentID, depth: p.depth + 1 });
}

function entry(m, env, kind, fields) {
  const e = { kind, type: env.type, time: env.time, step: env.step, task: env.task || "", ...fields };
  m.entries.push(e);
  m.touched.add(e);
  return e;
}

// apply folds one event into the model. seq is its stream sequence; an
// event at or below the last one applied is ignored, so a stream that
// reconnects and sends some again changes nothing.
export function apply(m, env, seq) {
  if (seq && seq <= m.lastSeq) return false;
  if (seq) m.lastSeq = seq;
  m.events++;
  m.updatedAt = env.time;
  const d = env.data || {};
  if (m.pending && RESPONSES[env.type] !== undefined) {
    m.pending.response = RESPONSES[env.type];
    m.touched.add(m.pending.entry);
    m.pending = null;
  } else if (m.pending && env.type !== "iteration.analyzed") {
    // Something else came first (a compaction): that is the answer.
    m.pending.response = env.type;
    m.touched.add(m.pending.entry);
    m.pending = null;
  }
  switch (env.type) {
    case "session.started": {
      m.state = "running";
      m.startedAt = env.time;
      m.workspace = d.workspace || "";
      const l = d.limits || {};
      if (l.context_window) m.limits.context_window = l.context_window;
      if (l.compact_at) m.limits.compact_at = l.compact_at;
      for (const t of (d.prd && d.prd.tasks) || []) {
        task(m, t.id, { title: t.title, criteria: t.acceptance_criteria || [] });
        if (!m.roots.includes(t.id)) m.roots.push(t.id);
      }
      entry(m, env, "session", { text: `Session started: ${m.roots.length} task(s)`, detail: m.workspace });
      break;
    }
    case "session.resumed":
      m.state = "running";
      m.reason = "";
      entry(m, env, "session", { text: `Resumed at task ${env.task || "?"}`, detail: d.message || "" });
      break;
    case "session.completed":
    case "session.failed":
    case "session.escalated":
    case "session.cancelled":
      m.state = TERMINAL[env.type];
      m.reason = d.reason || "";
      entry(m, env, "end", {
        state: m.state,
        text: `Session ${m.state}`,
        detail: [d.reason, d.diagnosis, d.tried && d.tried.length ? `tried: ${d.tried.join(", ")}` : ""].filter(Boolean).join(" · "),
      });
      break;
    case "task.started": {
      const t = d.task || {};
      const tk = task(m, t.id, { title: t.title || "", status: "active", criteria: t.acceptance_criteria || [] });
      if (t.parent_id) addChild(m, t.parent_id, t.id);
      else if (!m.roots.includes(t.id)) m.roots.push(t.id);
      m.current = t.id;
      entry(m, env, "task", { text: `Task ${t.id} started`, detail: tk.title });
      break;
    }
    case "task.completed": {
      const t = task(m, d.task_id, { status: "done", attempts: d.attempts || 0 });
      if (m.current === d.task_id) m.current = "";
      // The iterations the events showed for it: the event counts a split
      // parent's own turns since the split only.
      const its = Math.max(t.iterations, d.iterations || 0);
      entry(m, env, "task-done", { text: `Task ${d.task_id} done`, detail: `${its} iteration${its === 1 ? "" : "s"}, ${d.attempts} review${d.attempts === 1 ? "" : "s"}` });
      break;
    }
    case "memory.updated": {
      if (d.how === "already") break; // a redelivery, shown the first time
      if (d.error) {
        entry(m, env, "memory", { text: `Memory not updated from ${d.task_id}`, detail: d.error, error: true });
        break;
      }
      const again = d.resummarized ? `, summarised again (${d.resummarized})` : "";
      entry(m, env, "memory", { text: `Memory took in ${d.task_id}`, detail: `${d.notes} note(s) (${d.how}), ${d.tokens} of ${d.max_tokens} tokens, ${d.tasks} task(s)${again}` });
      break;
    }
    case "task.decomposed": {
      if (d.error) {
        entry(m, env, "decompose", { text: `${d.parent_id} could not be split`, detail: d.error, error: true });
        break;
      }
      task(m, d.parent_id, { status: "decomposed" });
      for (const s of d.subtasks || []) {
        task(m, s.id, { title: s.title, criteria: s.acceptance_criteria || [] });
        addChild(m, d.parent_id, s.id);
      }
      entry(m, env, "decompose", {
        text: `${d.parent_id} split into ${(d.subtasks || []).length} subtasks`,
        items: (d.subtasks || []).map((s) => `${s.id}: ${s.title}`),
      });
      break;
    }
    case "iteration.completed": {
      m.iteration = Math.max(m.iteration, d.iteration);
      const u = d.usage || {};
      m.builder.calls++;
      m.builder.input_tokens += u.input_tokens || 0;
      m.builder.output_tokens += u.output_tokens || 0;
      m.tokens += (u.input_tokens || 0) + (u.output_tokens || 0);
      const taskID = d.task_id || env.task || "";
      if (taskID) task(m, taskID).iterations++;
      m.points.push({ iteration: d.iteration, tokens: d.context_tokens || 0, task: taskID, compacted: !!d.compacted });
      entry(m, env, "iteration", {
        iteration: d.iteration,
        task: taskID,
        text: d.assistant_text || "",
        calls: (d.tool_calls || []).map(callLine),
        usage: u,
        context: d.context_tokens || 0,
        claimedDone: !!d.claimed_done,
        tests: d.tests || null,
        files: d.files_changed || [],
      });
      break;
    }
    case "iteration.analyzed": {
      if (!d.signal) break;
      const s = d.signal;
      const sig = {
        iteration: s.iteration || d.iteration,
        pattern: s.pattern,
        confidence: s.confidence,
        strength: s.strength || "",
        action: s.action,
        diagnosis: s.diagnosis || "",
        response: "",
      };
      sig.entry = entry(m, env, "stuck", { signal: sig });
      m.signals.push(sig);
      m.pending = sig;
      break;
    }
    case "critique.requested":
      task(m, (d.task && d.task.id) || env.task, { status: "review" });
      entry(m, env, "review", { text: `Critic reviewing ${(d.task && d.task.id) || env.task} (attempt ${d.attempt})`, detail: d.summary || "" });
      break;
    case "critique.completed": {
      const v = d.verdict || {};
      if (!v.approved) task(m, d.task_id, { status: "active" });
      task(m, d.task_id, { attempts: d.attempt || 0 });
      entry(m, env, "verdict", {
        approved: !!v.approved && !d.error,
        text: d.error ? `No verdict on ${d.task_id}` : `${v.approved ? "Approved" : "Changes requested on"} ${d.task_id}`,
        detail: d.error || v.feedback || "",
        items: v.unmet_criteria || [],
        verify: d.verify || null,
      });
      break;
    }
    case "prune.requested":
      entry(m, env, "prune-request", { text: `Pruning the context of ${d.task_id}`, detail: d.signal ? d.signal.pattern : "" });
      break;
    case "prune.completed":
    case "compaction.completed": {
      const kind = env.type === "prune.completed" ? "prune" : "compaction";
      const drop = {
        kind,
        iteration: m.iteration,
        before: d.tokens_before || 0,
        after: d.tokens_after || 0,
        error: d.error || "",
        tier: d.tier || "",
        mode: d.mode || "",
        task: d.task_id || env.task || "",
      };
      m.drops.push(drop);
      const saved = drop.before - drop.after;
      let text;
      if (drop.error) text = `${kind === "prune" ? "Pruning" : "Compaction"} failed`;
      else if (saved !== 0) text = `${kind === "prune" ? "Pruned" : "Compacted"}: ${drop.before} → ${drop.after} tokens`;
      else text = `${kind === "prune" ? "Prune" : "Compaction"} changed nothing (${drop.before} tokens)`;
      const detail = kind === "prune"
        ? `${(d.removed_units || []).length} unit(s) removed, ${(d.kept_units || []).length} kept${d.fallback ? ", note without the model" : ""}`
        : [d.mode, d.tier, `${(d.applied || []).length} applied`, `${(d.skipped || []).length} skipped`, `${d.llm_calls || 0} model call(s)`].filter(Boolean).join(" · ");
      entry(m, env, kind, { text, detail: drop.error || detail, error: !!drop.error, drop });
      break;
    }
    case "decompose.requested":
      entry(m, env, "decompose-request", { text: `Splitting ${(d.task && d.task.id) || env.task} into subtasks`, detail: d.signal ? d.signal.pattern : "" });
      break;
    case "compaction.requested":
    case "iteration.requested":
      break;
    default:
      entry(m, env, "other", { text: env.type });
  }
  return true;
}

// callLine is one tool call as the activity list shows it.
function callLine(c) {
  let status = "ok";
  if (c.error) status = `error: ${firstLine(c.error)}`;
  else if (c.exit_code) status = `exit ${c.exit_code}`;
  return { name: c.name, args: compactArgs(c.args), status, failed: status !== "ok" };
}

// compactArgs shows a call's arguments on one line, as the terminal
// console does: paths and commands as they are, file contents by size.
function compactArgs(args) {
  if (!args || typeof args !== "object") return args ? String(args) : "";
  const parts = [];
  for (const k of ["path", "command", "pattern", "id"]) if (k in args) parts.push(`${k}=${args[k]}`);
  for (const k of ["content", "new"]) if (typeof args[k] === "string") parts.push(`${k}=<${args[k].length} bytes>`);
  return parts.join(" ");
}

function firstLine(s) {
  s = String(s).trim();
  const i = s.indexOf("\n");
  return i >= 0 ? `${s.slice(0, i)} …` : s;
}

// overlay lays the API's summary over the model: what the events do not
// carry (the team, the usage of every role, the limits the builder
// applied) or what the summary knows better (turns and attempts).
export function overlay(m, s) {
  m.summary = s;
  if (s.limits) {
    if (s.limits.context_window) m.limits.context_window = s.limits.context_window;
    if (s.limits.compact_at) m.limits.compact_at = s.limits.compact_at;
  }
  if (!m.state && s.state) m.state = s.state;
  const walk = (list, parent) => {
    for (const t of list || []) {
      const known = m.tasks.has(t.id);
      const tk = task(m, t.id, { turns: t.turns || 0, attempts: Math.max(t.attempts || 0, known ? m.tasks.get(t.id).attempts : 0) });
      if (!tk.title) tk.title = t.title || "";
      // The events are newer than a summary asked for a moment ago: its
      // status counts only for a task the events have not moved yet.
      if (t.status && tk.status === "pending") tk.status = t.status;
      if (parent) addChild(m, parent, t.id);
      else if (!t.parent_id && !m.roots.includes(t.id)) m.roots.push(t.id);
      if (t.parent_id && !parent) addChild(m, t.parent_id, t.id);
      // The API lists a task's subtasks by id (each is also a task of the
      // list, with its parent_id); nested task objects are walked too.
      const subs = t.subtasks || [];
      for (const c of subs) if (typeof c === "string") addChild(m, t.id, c);
      walk(subs.filter((c) => c && typeof c === "object"), t.id);
    }
  };
  walk(s.tasks, "");
}
