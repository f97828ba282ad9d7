// What both pages share: the token field, the theme switch, calls to the
// API with the Bearer header, the event stream reader and number formats.
// Text that comes from the API (task titles, the model's words, tool
// arguments) only ever reaches the page through textContent, never as
// markup.

const TOKEN_KEY = "ralph.console.token";
const THEME_KEY = "ralph.console.theme";

// ApiError is a failed call: status 401 means the token was refused.
export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

let settings = null;

// loadSettings reads console.json (where the API is, the prices), served
// by the same handler as the page; path is relative to the page, so the
// handler can be mounted under a prefix.
export async function loadSettings(path) {
  if (settings) return settings;
  const res = await fetch(new URL(path, location.href), { cache: "no-store" });
  if (!res.ok) throw new Error(`console settings: HTTP ${res.status}`);
  settings = await res.json();
  settings.prices = settings.prices || {};
  return settings;
}

export function token() {
  return localStorage.getItem(TOKEN_KEY) || "";
}

// setupToken wires the token field: saving stores the token in
// localStorage and calls onChange, so the page loads again with it.
export function setupToken(onChange) {
  const form = document.getElementById("token-form");
  const input = document.getElementById("token");
  input.value = token();
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const value = input.value.trim();
    if (value) localStorage.setItem(TOKEN_KEY, value);
    else localStorage.removeItem(TOKEN_KEY);
    onChange();
  });
}

// setupTheme follows the system's dark or light preference until the
// switch picks one, which is remembered.
export function setupTheme() {
  const root = document.documentElement;
  const saved = localStorage.getItem(THEME_KEY);
  if (saved) root.dataset.theme = saved;
  document.getElementById("theme").addEventListener("click", () => {
    const dark = root.dataset.theme
      ? root.dataset.theme === "dark"
      : matchMedia("(prefers-color-scheme: dark)").matches;
    root.dataset.theme = dark ? "light" : "dark";
    localStorage.setItem(THEME_KEY, root.dataset.theme);
  });
}

function headers() {
  return { Authorization: `Bearer ${token()}` };
}

async function failure(res) {
  let message = `HTTP ${res.status}`;
  try {
    const body = await res.json();
    if (body && body.error) message = body.error;
  } catch {
    // Not JSON: the status says enough.
  }
  return new ApiError(res.status, message);
}

// getJSON calls the API at path (below its base) with the token.
export async function getJSON(path, signal) {
  const res = await fetch(settings.api + path, { headers: headers(), signal, cache: "no-store" });
  if (!res.ok) throw await failure(res);
  return res.json();
}

// streamEvents reads a server-sent event stream with fetch, since
// EventSource cannot send the Authorization header. Each message is given
// to onMessage as {id, event, data}; it returns when the stream ends and
// throws when the call fails or signal aborts it.
export async function streamEvents(path, signal, onOpen, onMessage) {
  const res = await fetch(settings.api + path, {
    headers: { ...headers(), Accept: "text/event-stream" },
    signal,
    cache: "no-store",
  });
  if (!res.ok) throw await failure(res);
  onOpen();
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  let msg = { id: "", event: "", data: [] };
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let nl;
    while ((nl = buffer.search(/\r\n|\r|\n/)) >= 0) {
      const line = buffer.slice(0, nl);
      buffer = buffer.slice(nl + (buffer.startsWith("\r\n", nl) ? 2 : 1));
      if (line === "") {
        if (msg.data.length) onMessage({ id: msg.id, event: msg.event || "message", data: msg.data.join("\n") });
        msg = { id: "", event: "", data: [] };
        continue;
      }
      if (line.startsWith(":")) continue; // a comment: the server's keep-alive
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? "" : line.slice(colon + 1);
      if (value.startsWith(" ")) value = value.slice(1);
      if (field === "id") msg.id = value;
      else if (field === "event") msg.event = value;
      else if (field === "data") msg.data.push(value);
    }
  }
}

// el makes an element with a class and text (always as text).
export function el(tag, className, text) {
  const e = document.createElement(tag);
  if (className) e.className = className;
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}

const intFormat = new Intl.NumberFormat("en-US");

export function int(n) {
  return intFormat.format(Math.round(n || 0));
}

// short writes a count the way a screen across the room can read it.
export function short(n) {
  n = n || 0;
  if (Math.abs(n) >= 1e6) return `${(n / 1e6).toFixed(n >= 1e7 ? 0 : 1)}M`;
  if (Math.abs(n) >= 1e4) return `${Math.round(n / 1e3)}k`;
  if (Math.abs(n) >= 1e3) return `${(n / 1e3).toFixed(1)}k`;
  return String(Math.round(n));
}

export function money(v) {
  if (v === 0) return "0";
  if (v >= 100) return v.toFixed(0);
  if (v >= 1) return v.toFixed(2);
  return v.toFixed(4);
}

// ago says how long ago (or how long) a moment was, in the largest unit.
export function duration(ms) {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m ${String(s % 60).padStart(2, "0")}s`;
  const h = Math.floor(m / 60);
  if (h < 48) return `${h}h ${String(m % 60).padStart(2, "0")}m`;
  return `${Math.floor(h / 24)}d ${h % 24}h`;
}

export function since(iso, now = Date.now()) {
  const t = Date.parse(iso);
  return Number.isNaN(t) ? "–" : duration(now - t);
}

// clock is a time of day for the activity list.
export function clock(iso) {
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? "" : d.toLocaleTimeString("en-GB", { hour12: false });
}

// status shows the connection state in the bar.
export function status(kind, text) {
  const s = document.getElementById("status");
  s.dataset.status = kind;
  s.textContent = text;
}

// notice shows (or, with no text, hides) the message under the bar.
export function notice(text, kind = "error") {
  const n = document.getElementById("notice");
  n.hidden = !text;
  n.dataset.kind = kind;
  n.textContent = text || "";
}

// explain turns a failed call into what a person should do.
export function explain(err) {
  if (err instanceof ApiError && err.status === 401) {
    return token()
      ? "The API refused this token. Enter your team's token above."
      : "Enter your team's API token above (it is kept in this browser only).";
  }
  if (err instanceof ApiError && err.status === 404) return "No such session for this token's team.";
  return `The API could not be reached: ${err.message}`;
}

export const STATES = ["running", "escalated", "failed", "cancelled", "completed"];
