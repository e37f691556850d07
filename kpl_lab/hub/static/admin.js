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
  return el("table", {}, el("tr", {}, ...headers.map((h) => el("th", {}, h))),
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

function chart(points) {
  const W = 720, H = 160, NS = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(NS, "svg");
  svg.setAttribute("width", W); svg.setAttribute("height", H + 20);
  if (!points.length) { const t = document.createElementNS(NS, "text"); t.setAttribute("y", 20); t.textContent = "No history yet."; svg.append(t); return svg; }
  const t0 = points[0].time, t1 = Math.max(points[points.length - 1].time, t0 + 1);
  const x = (t) => ((t - t0) / (t1 - t0)) * (W - 40) + 30, y = (v) => H - (v / 100) * (H - 10);
  const series = [["cpu", "#1f77b4", (p) => p.cpu], ["memory", "#2ca02c", (p) => p.memory]];
  const gpuCount = Math.max(0, ...points.map((p) => p.gpus.length));
  for (let i = 0; i < gpuCount; i++) series.push([`gpu ${i}`, ["#d62728", "#ff7f0e", "#9467bd", "#8c564b"][i % 4], (p) => p.gpus[i] ?? 0]);
  series.forEach(([name, color, value], i) => {
    const line = document.createElementNS(NS, "polyline");
    line.setAttribute("fill", "none"); line.setAttribute("stroke", color);
    line.setAttribute("points", points.map((p) => `${x(p.time).toFixed(1)},${y(value(p)).toFixed(1)}`).join(" "));
    svg.append(line);
    const label = document.createElementNS(NS, "text");
    label.setAttribute("x", 30 + i * 90); label.setAttribute("y", H + 16); label.setAttribute("fill", color);
    label.textContent = `${name} %`; svg.append(label);
  });
  return svg;
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
      return el("span", {}, `${used} / `, el("input", { class: "quota", name: k, type: "number", min: "0", step: "any", value: p.quota[k] ?? "", placeholder: "∞" }));
    });
    const save = el("button", {}, "Save");
    save.addEventListener("click", () => saveQuota(p.name, save.closest("tr")));
    return [p.name, p.members.join(", "), ...cells, save];
  }));
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
  document.getElementById("history").replaceChildren(chart(data.history));
  if (!document.activeElement || !document.activeElement.classList.contains("quota")) {
    document.getElementById("projects").replaceChildren(projects(data.projects, data.reservations));
  }
  document.getElementById("reservations").replaceChildren(!data.reservations.length ? el("p", {}, "None.") : table(["project", "kind", "owner", "cpu", "memory (MB)", "devices", "since"],
    data.reservations.map((r) => [r.project, r.kind, r.owner, r.cpu, r.memory, JSON.stringify(r.devices), r.since])));
  document.getElementById("users").replaceChildren(table(["user", "admin", "projects", "servers"],
    data.users.map((u) => [u.name, u.admin ? "yes" : "", u.projects.join(", "), Object.keys(u.servers).map((s) => s || "(default)").join(", ")])));
}

refresh();
setInterval(refresh, 5000);
