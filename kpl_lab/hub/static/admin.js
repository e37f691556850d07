// The KPL Lab admin page: reads the overview and the chosen use history every few seconds (the chosen
// refresh), writes quotas and alert rules in place, searches the audit log and the logs on demand.
"use strict";
const body = document.body;
const prefix = body.dataset.prefix;
const KEYS = ["cpu", "memory", "gpu", "npu", "notebooks"];

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  for (const child of children) node.append(child instanceof Node ? child : String(child ?? ""));
  return node;
}

function table(headers, rows) {
  return el("table", { class: "table table-sm" }, el("tr", {}, ...headers.map((h) => el("th", {}, h))),
    ...rows.map((r) => el("tr", {}, ...r.map((c) => el("td", {}, c)))));
}

function live(sample) {
  if (!sample) return el("p", {}, "No sample yet.");
  const parts = [el("p", {}, `CPU ${sample.cpu_percent.toFixed(0)} % of ${sample.cpu_count} cores — memory ${sample.memory_used_mb} / ${sample.memory_total_mb} MB`)];
  if (sample.gpus.length) {
    parts.push(table(["GPU", "name", "utilization", "memory (MB)", "processes"], sample.gpus.map((g) => [
      g.index, g.name, `${g.utilization_percent} %`, `${g.memory_used_mb} / ${g.memory_total_mb}`,
      g.processes.map((p) => `${p.user} (pid ${p.pid}, ${p.memory_mb} MB)`).join(", ") || "—"])));
  } else {
    parts.push(el("p", { class: "note" }, `No GPUs: ${sample.gpu_error}`));
  }
  if (sample.npus.length) {
    parts.push(table(Object.keys(sample.npus[0]), sample.npus.map((n) => Object.values(n))));
  } else {
    parts.push(el("p", { class: "note" }, `No NPUs: ${sample.npu_error}`));
  }
  return el("div", {}, ...parts);
}

// the use history's chart, drawn by uPlot as the job view's curves; kept between refreshes
let historyPlot = null;
let chartPeriod = 86400;  // seconds, as chosen
const COLOURS = ["#4e79a7", "#59a14f", "#e15759", "#f28e2b", "#b07aa1", "#9c755f"];
// the history's keys, in the legend's words (kpl_lab.monitoring.history.CHART)
const LINES = [["cpu_percent", "CPU (%)"], ["memory_percent", "memory (%)"], ["gpu_percent", "GPU (%)"],
  ["npu_percent", "NPU (%)"], ["cpu_held_percent", "CPU held (%)"], ["memory_held_percent", "memory held (%)"]];

function historyLines(points) {
  return LINES.filter(([key]) => points.some((p) => key in p.use));
}

function historyColumns(points, lines) {
  return [points.map((p) => Date.parse(p.time) / 1000), ...lines.map(([key]) => points.map((p) => p.use[key] ?? null))];
}

function historyChart(container, points) {
  if (typeof uPlot === "undefined") {
    container.replaceChildren(el("p", { class: "note" }, "The chart library (uPlot) did not load: see the service log."));
    return;
  }
  if (!points.length) {
    historyPlot?.destroy();
    historyPlot = null;
    container.replaceChildren(el("p", {}, "No history yet."));
    return;
  }
  const lines = historyLines(points);
  const data = historyColumns(points, lines);
  const names = lines.map(([, label]) => label);
  if (historyPlot && historyPlot.series.slice(1).map((s) => s.label).join() === names.join()) {
    historyPlot.setData(data);
    return;
  }
  historyPlot?.destroy();
  container.replaceChildren();
  const percent = (u, value) => (value == null ? "—" : `${value.toFixed(1)} %`);
  historyPlot = new uPlot({
    width: Math.max(320, container.clientWidth),
    height: 220,
    legend: { show: true },
    scales: {
      // the chosen period up to now, however few samples it has yet
      x: { time: true, range: () => [Date.now() / 1000 - chartPeriod, Date.now() / 1000] },
      y: { range: (u, min, max) => [0, Math.max(100, max ?? 0)] },
    },
    // labels like "12:25pm" need more room than uPlot's default spacing, or they overlap
    axes: [{ label: "time (local)", space: 90 }, { label: "use (%)", values: (u, ticks) => ticks.map((t) => `${t} %`) }],
    series: [
      { label: "time" },
      ...names.map((label, i) => ({ label, stroke: COLOURS[i % COLOURS.length], width: 1.5, value: percent })),
    ],
  }, data, container);
}

async function saveQuota(project, row) {
  const quota = {};
  for (const input of row.querySelectorAll("input.quota")) {
    if (input.value !== "") quota[input.name] = Number(input.value);
  }
  const response = await fetch(`${prefix}admin/api/projects/${encodeURIComponent(project)}/quota`, {
    method: "PUT", headers: { "Content-Type": "application/json", "X-XSRFToken": body.dataset.xsrf },
    body: JSON.stringify(quota),
  });
  const answer = await response.json();
  document.getElementById("status").textContent = response.ok ? `Saved the quota of ${project}.` : `Not saved: ${answer.message}`;
}

function projects(list, held) {
  return table(["project", "members", ...KEYS.map((k) => `${k} (used / quota)`), ""], list.map((p) => {
    const cells = KEYS.map((k) => {
      const used = k === "gpu" || k === "npu" ? (p.used.devices?.[k]?.length ?? 0)
        : k === "notebooks" ? held.filter((r) => r.project === p.name && r.kind === "notebook").length
        : (p.used[k] ?? 0);
      return el("span", {}, `${used} / `, el("input", { class: "quota form-control form-control-sm", name: k, type: "number", min: "0", step: "any", value: p.quota[k] ?? "", placeholder: "∞" }));
    });
    const save = el("button", { class: "btn btn-sm btn-outline-primary" }, "Save");
    save.addEventListener("click", () => saveQuota(p.name, save.closest("tr")));
    return [p.name, p.members.join(", "), ...cells, save];
  }));
}

// a notebook's owner id is user/server: "admin/" is admin's default server
function owner(r) {
  if (r.kind !== "notebook") return r.owner;
  const [user, server] = r.owner.split("/");
  return server ? `${user} (server ${server})` : `${user} (default server)`;
}

function devices(held) {
  const shared = held.shared || [];
  const parts = Object.entries(held).filter(([kind]) => kind !== "shared")
    .map(([kind, indexes]) => `${kind.toUpperCase()} ${indexes.join(", ")}${shared.includes(kind) ? " (shared)" : ""}`);
  return parts.join("; ") || "none";
}

async function send(path, payload, done) {
  const response = await fetch(`${prefix}admin/api/${path}`, {
    method: "POST", headers: { "Content-Type": "application/json", "X-XSRFToken": body.dataset.xsrf },
    body: JSON.stringify(payload),
  });
  const answer = await response.json();
  document.getElementById("status").textContent = response.ok ? done : `Not done: ${answer.message}`;
  if (response.ok) await refresh();
  return response.ok;
}

function onSubmit(id, action) {
  document.getElementById(id).addEventListener("submit", async (event) => {
    event.preventDefault();
    const form = event.target;
    if (await action(Object.fromEntries(new FormData(form)))) form.reset();
  });
}

onSubmit("new-user", ({ name }) => send("users", { name }, `Created user ${name}.`));
onSubmit("new-project", ({ name }) => send("projects", { name, quota: {} }, `Created project ${name}.`));
onSubmit("new-member", ({ user, project }) =>
  send(`projects/${encodeURIComponent(project)}/members`, { user }, `Added ${user} to ${project}.`));

function options(select, names) {
  if (document.activeElement === select) return;
  const chosen = select.value;
  select.replaceChildren(...names.map((n) => el("option", { value: n }, n)));
  if (names.includes(chosen)) select.value = chosen;
}

// the hub's cookie check wants the XSRF token on a script's GET too
const READ = { headers: { Accept: "application/json", "X-XSRFToken": body.dataset.xsrf } };

async function read(path) {
  const response = await fetch(`${prefix}admin/api/${path}`, READ);
  const answer = await response.json();
  if (!response.ok) throw new Error(answer.message || String(response.status));
  return answer;
}

async function write(method, path, payload) {
  const response = await fetch(`${prefix}admin/api/${path}`, {
    method, headers: { "Content-Type": "application/json", "X-XSRFToken": body.dataset.xsrf },
    body: payload === undefined ? undefined : JSON.stringify(payload),
  });
  const answer = await response.json();
  return { ok: response.ok, answer };
}

function say(text) { document.getElementById("status").textContent = text; }

// an <input type="datetime-local"> (local time) as the API's ISO 8601 time
function isoTime(value) { return value ? new Date(value).toISOString() : ""; }

function query(fields) {
  return new URLSearchParams(Object.entries(fields).filter(([, v]) => v !== "" && v != null)).toString();
}

const TOTALS = [["datasets", "datasets"], ["models", "models"], ["algorithms", "algorithms"], ["jobs_running", "jobs running"],
  ["jobs_queued", "jobs queued"], ["jobs_finished", "jobs finished"], ["jobs_failed", "of them failed"], ["deployments", "deployments"]];

function totals(found) {
  if (!found) return [el("p", {}, "No snapshot yet (the first comes within the service's first rounds).")];
  return TOTALS.map(([key, label]) => el("div", { "data-total": key }, el("span", { class: "total" }, found[key]), label));
}

async function refreshUsage() {
  const form = document.getElementById("usage");
  const fields = Object.fromEntries(new FormData(form));
  let found;
  try {
    found = await read(`usage?${query({ scope: fields.scope, name: fields.name, period: fields.period })}`);
  } catch (error) { say(`Could not load the use history: ${error.message}`); return; }
  chartPeriod = found.period_seconds;
  options(document.getElementById("usage-name"), found.names[found.scope].length ? found.names[found.scope] : [found.name]);
  if (found.name) document.getElementById("usage-name").value = found.name;
  historyChart(document.getElementById("history"), found.points);
}

function when(text) { return text ? new Date(text).toLocaleString() : "—"; }

function labels(found) { return Object.entries(found).map(([k, v]) => `${k}=${v}`).join(", ") || "—"; }

function alertRows(found) {
  if (!found.length) return el("p", {}, "No alert pending, firing or lately resolved.");
  const rows = found.map((a) => {
    const row = el("tr", { class: a.state, "data-alert": a.id }, ...[a.state, a.rule, a.severity, labels(a.labels), a.summary,
      when(a.fired || a.since), when(a.resolved)].map((c) => el("td", {}, c)));
    return row;
  });
  return el("table", { class: "table table-sm" },
    el("tr", {}, ...["state", "rule", "severity", "where", "what", "since", "resolved"].map((h) => el("th", {}, h))), ...rows);
}

function rulePayload(rule, changes) {
  const keys = ["name", "metric", "operator", "threshold", "duration_seconds", "target", "severity", "notify", "enabled", "description"];
  return Object.fromEntries(keys.map((k) => [k, k in changes ? changes[k] : rule[k]]));
}

async function saveRule(rule, changes, done) {
  const { ok, answer } = await write("PUT", `alerts/rules/${rule.id}`, rulePayload(rule, changes));
  say(ok ? done : `Not saved: ${answer.message}`);
  if (ok) await refreshAlerts();
}

function notifyList(text) { return text.split(",").map((t) => t.trim()).filter(Boolean); }

function ruleRows(rules) {
  return el("table", { class: "table table-sm" },
    el("tr", {}, ...["on", "rule", "signal", "condition", "for (s)", "scope", "target", "notify", ""].map((h) => el("th", {}, h))),
    ...rules.map((rule) => {
      const enabled = el("input", { type: "checkbox", "aria-label": `enable ${rule.name}` });
      enabled.checked = rule.enabled;
      enabled.addEventListener("change", () => saveRule(rule, { enabled: enabled.checked },
        `${enabled.checked ? "Enabled" : "Disabled"} ${rule.name}.`));
      const threshold = el("input", { class: "quota form-control form-control-sm", type: "number", step: "any", name: "threshold", value: rule.threshold });
      const duration = el("input", { class: "quota form-control form-control-sm", type: "number", min: "0", name: "duration_seconds", value: rule.duration_seconds });
      const notify = el("input", { class: "form-control form-control-sm", name: "notify", value: rule.notify.join(", ") });
      const save = el("button", { class: "btn btn-sm btn-outline-primary" }, "Save");
      save.addEventListener("click", () => saveRule(rule, { threshold: Number(threshold.value),
        duration_seconds: Number(duration.value), notify: notifyList(notify.value) }, `Saved the rule ${rule.name}.`));
      const remove = el("button", { class: "btn btn-sm btn-outline-danger" }, "Delete");
      remove.addEventListener("click", async () => {
        const { ok, answer } = await write("DELETE", `alerts/rules/${rule.id}`);
        say(ok ? `Deleted the rule ${rule.name}.` : `Not deleted: ${answer.message}`);
        if (ok) await refreshAlerts();
      });
      return el("tr", { "data-rule": rule.name }, el("td", {}, enabled), el("td", {}, rule.name), el("td", {}, rule.metric),
        el("td", {}, `${rule.operator} `, threshold), el("td", {}, duration), el("td", {}, rule.scope),
        el("td", {}, rule.target || "all"), el("td", {}, notify), el("td", {}, save, remove));
    }));
}

function deliveryRows(found) {
  if (!found.length) return el("p", {}, "None sent yet.");
  return table(["rule", "event", "to", "state", "tries", "error", "sent"],
    found.map((d) => [d.rule, d.event, d.target, d.state, d.attempts, d.error || "—", when(d.sent)]));
}

async function refreshAlerts() {
  let found;
  try { found = await read("alerts"); } catch (error) { say(`Could not load the alerts: ${error.message}`); return; }
  document.getElementById("alerts").replaceChildren(alertRows(found.alerts));
  if (!document.activeElement || !document.getElementById("alert-rules").contains(document.activeElement)) {
    document.getElementById("alert-rules").replaceChildren(ruleRows(found.rules));
  }
  document.getElementById("alert-deliveries").replaceChildren(deliveryRows(found.deliveries));
  const metric = document.getElementById("new-alert-metric");
  if (!metric.options.length) {
    metric.replaceChildren(...found.signals.map((s) => el("option", { value: s.name, title: s.description }, `${s.name} (${s.scope}, ${s.unit})`)));
  }
}

document.getElementById("new-alert-rule").addEventListener("submit", async (event) => {
  event.preventDefault();
  const form = event.target;
  const fields = Object.fromEntries(new FormData(form));
  const { ok, answer } = await write("POST", "alerts/rules", { ...fields, threshold: Number(fields.threshold),
    duration_seconds: Number(fields.duration_seconds || 0), notify: notifyList(fields.notify || "") });
  say(ok ? `Added the rule ${answer.name}.` : `Not added: ${answer.message}`);
  if (ok) { form.reset(); await refreshAlerts(); }
});

function auditQuery() {
  const fields = Object.fromEntries(new FormData(document.getElementById("audit-filter")));
  return query({ ...fields, since: isoTime(fields.since), until: isoTime(fields.until) });
}

async function showAudit() {
  let found;
  try { found = await read(`audit?${auditQuery()}`); } catch (error) { say(`Could not search the audit log: ${error.message}`); return; }
  document.getElementById("audit").replaceChildren(!found.events.length ? el("p", {}, "No event matches.") :
    table(["time", "user", "action", "target", "project", "outcome", "from", "detail"], found.events.map((e) =>
      [when(e.time), e.user || "—", e.action, e.target, e.project || "—", `${e.outcome}${e.status ? ` (${e.status})` : ""}`,
        e.client || "—", Object.keys(e.detail).length ? JSON.stringify(e.detail) : ""])));
}

document.getElementById("audit-filter").addEventListener("submit", (event) => { event.preventDefault(); showAudit(); });
document.getElementById("audit-export").addEventListener("click", (event) => {
  event.currentTarget.href = `${prefix}admin/api/audit?${query({ format: "jsonl" })}&${auditQuery()}`;
});

document.getElementById("log-search").addEventListener("submit", async (event) => {
  event.preventDefault();
  const fields = Object.fromEntries(new FormData(event.target));
  let found;
  try {
    found = await read(`logs?${query({ ...fields, since: isoTime(fields.since), until: isoTime(fields.until) })}`);
  } catch (error) { say(`Could not search the logs: ${error.message}`); return; }
  const shown = found.lines.map((l) => el("tr", {}, el("td", {}, when(l.time)), el("td", {}, l.name), el("td", {}, l.project || "—"),
    el("td", {}, l.user || "—"), el("td", {}, el("pre", {}, l.line))));
  document.getElementById("logs").replaceChildren(!shown.length ? el("p", {}, "No line matches.") :
    el("table", { class: "table table-sm" }, el("tr", {}, ...["time", "log", "project", "user", "line"].map((h) => el("th", {}, h))), ...shown),
    el("p", { class: "text-muted" }, `${found.scanned_bytes} bytes read${found.truncated ? "; the search stopped at its bound: narrow it" : ""}.`));
});

async function refresh() {
  const response = await fetch(`${prefix}admin/api/overview`, READ);
  if (!response.ok) { document.getElementById("status").textContent = `Could not load: ${response.status}`; return; }
  const data = await response.json();
  document.getElementById("capacity").textContent = `Capacity: ${data.capacity.cpu} CPUs, ${data.capacity.memory} MB.`;
  if (document.getElementById("status").textContent === "Loading…") document.getElementById("status").textContent = "";
  document.getElementById("live").replaceChildren(live(data.live));
  document.getElementById("totals").replaceChildren(...totals(data.totals));
  if (!document.activeElement || !document.activeElement.classList.contains("quota")) {
    document.getElementById("projects").replaceChildren(projects(data.projects, data.reservations));
  }
  document.getElementById("reservations").replaceChildren(!data.reservations.length ? el("p", {}, "None.") : table(["project", "kind", "owner", "cpu", "memory (MB)", "devices", "since"],
    data.reservations.map((r) => [r.project, r.kind, owner(r), r.cpu, r.memory, devices(r.devices), r.since])));
  options(document.getElementById("new-member-user"), data.users.map((u) => u.name));
  options(document.getElementById("new-member-project"), data.projects.map((p) => p.name));
  document.getElementById("users").replaceChildren(table(["user", "admin", "projects", "servers"],
    data.users.map((u) => [u.name, u.admin ? "yes" : "", u.projects.join(", "), Object.keys(u.servers).map((s) => s || "(default)").join(", ")])));
}

async function refreshAll() {
  await Promise.all([refresh(), refreshUsage(), refreshAlerts()]);
}

// the chosen refresh period: a change of scope, name or period reads the history at once
let timer = null;
function schedule() {
  clearInterval(timer);
  const seconds = Number(document.getElementById("refresh").value);
  if (seconds > 0) timer = setInterval(refreshAll, seconds * 1000);
}
document.getElementById("usage").addEventListener("change", (event) => {
  if (event.target.id === "refresh") { schedule(); return; }
  if (event.target.id === "usage-scope") document.getElementById("usage-name").replaceChildren();
  refreshUsage();
});
document.getElementById("usage").addEventListener("submit", (event) => event.preventDefault());

refreshAll();
showAudit();
schedule();
