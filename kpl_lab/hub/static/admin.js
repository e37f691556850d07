// The KPL Lab admin page: reads the overview every 5 s, writes quotas in place.
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

// the 24-hour chart, drawn by uPlot as the job view's curves; kept between refreshes
let historyPlot = null;
const COLOURS = ["#4e79a7", "#59a14f", "#e15759", "#f28e2b", "#b07aa1", "#9c755f"];

function historyColumns(points) {
  const gpuCount = Math.max(0, ...points.map((p) => p.gpus.length));
  const columns = [points.map((p) => p.time), points.map((p) => p.cpu), points.map((p) => p.memory)];
  for (let i = 0; i < gpuCount; i++) columns.push(points.map((p) => p.gpus[i] ?? null));
  return columns;
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
  const data = historyColumns(points);
  if (historyPlot && historyPlot.series.length === data.length) {
    historyPlot.setData(data);
    return;
  }
  historyPlot?.destroy();
  container.replaceChildren();
  const percent = (u, value) => (value == null ? "—" : `${value.toFixed(1)} %`);
  const names = ["CPU (%)", "memory (%)", ...data.slice(3).map((_, i) => `GPU ${i} (%)`)];
  historyPlot = new uPlot({
    width: Math.max(320, container.clientWidth),
    height: 220,
    legend: { show: true },
    scales: {
      // one sample (a service just started) has no span of its own: show the hour before it
      x: { time: true, range: (u, min, max) => (u.data[0].length === 1 ? [u.data[0][0] - 3600, u.data[0][0]] : [min, max]) },
      y: { range: [0, 100] },
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

async function refresh() {
  const response = await fetch(`${prefix}admin/api/overview`, {
    // the hub's cookie check wants the XSRF token on a script's GET too
    headers: { Accept: "application/json", "X-XSRFToken": body.dataset.xsrf },
  });
  if (!response.ok) { document.getElementById("status").textContent = `Could not load: ${response.status}`; return; }
  const data = await response.json();
  document.getElementById("capacity").textContent = `Capacity: ${data.capacity.cpu} CPUs, ${data.capacity.memory} MB.`;
  if (document.getElementById("status").textContent === "Loading…") document.getElementById("status").textContent = "";
  document.getElementById("live").replaceChildren(live(data.live));
  historyChart(document.getElementById("history"), data.history);
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

refresh();
setInterval(refresh, 5000);
