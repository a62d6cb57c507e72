// The planner page: the form's fields are trainingcost.plan's keywords; the query lives in the address, so a shared
// link reproduces the plan. Every answer comes from /api/plan (web/compute.py), which calls the Python API.
"use strict";

const $ = (id) => document.getElementById(id);
const SVG = "http://www.w3.org/2000/svg";
const COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#7f7f7f",
                 "#bcbd22"];
const PART_COLOURS = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1"];
// The server's access token, from the address `trainingcost serve` printed (or a shared link): sent with every
// request in a header, never kept in a cookie (a cookie of 127.0.0.1 reaches every port there: docs/page.md).
const TOKEN = new URLSearchParams(location.search).get("token") || "";
const AUTH = { "X-Trainingcost-Token": TOKEN };
let options = null;
let asked = 0;
let timer = null;
let inFlight = null;

function fill(select, values, labels) {
  for (let i = 0; i < values.length; i++) {
    const o = document.createElement("option");
    o.value = values[i];
    o.textContent = labels ? `${values[i]} (${labels[i]})` : values[i];
    select.appendChild(o);
  }
}

function setUp(opts) {
  options = opts;
  fill($("preset"), opts.presets);
  fill($("gpu"), opts.gpus.map((g) => g[0]), opts.gpus.map((g) => g[1]));
  fill($("gpu"), ["(pasted)"], ["a device of your own"]);
  fill($("cluster"), opts.clusters);
  fill($("framework"), opts.frameworks);
  for (const name of ["precision", "sharding", "schedule"]) fill($(name), opts.choices[name]);
  for (const name of ["cost_model", "layout", "checkpointing", "objective", "offload", "finetune"]) {
    fill($(name), opts.choices[name]);
    $(name).value = opts.defaults[name];
  }
  for (const rule of opts.rules) {
    const label = document.createElement("label");
    const box = document.createElement("input");
    box.type = "checkbox"; box.value = rule; box.checked = true; box.className = "rule";
    label.append(box, rule.toUpperCase());
    $("rules").appendChild(label);
  }
}

// The form as the API's keywords (text), leaving out what equals its default.
function query() {
  const q = new URLSearchParams();
  for (const el of $("form").querySelectorAll("[name]")) {
    if (el.closest("[hidden]")) continue;
    let value = el.type === "checkbox" ? (el.checked ? "true" : "") : el.value.trim();
    if (el.name === "gpu" && value === "(pasted)") value = $("gpu_json").value.trim();
    if (value && value !== options.defaults[el.name]) q.set(el.name, value);
  }
  const boxes = [...document.querySelectorAll("input.rule")];
  const chosen = boxes.filter((b) => b.checked).map((b) => b.value);
  if (chosen.length !== boxes.length) q.set("rule", chosen.join(","));
  return q;
}

// The address's query into the form (a shared link).
function load(q) {
  for (const el of $("form").querySelectorAll("[name]")) {
    const value = q.get(el.name);
    if (el.type === "checkbox") el.checked = value === "true";
    else if (el.name === "gpu" && value && value.startsWith("{")) { el.value = "(pasted)"; $("gpu_json").value = value; }
    else {
      const given = options.defaults[el.name];  // a list (--gpus) as the command line writes it
      el.value = value !== null ? value : Array.isArray(given) ? given.join(",") : (given || "");
    }
  }
  const rules = q.get("rule");
  const wanted = !rules || rules === "all" ? null : rules.split(",").map((r) => r.trim().toLowerCase());
  for (const box of document.querySelectorAll("input.rule")) box.checked = !wanted || wanted.includes(box.value);
  shown();
}

function shown() {
  $("pasted-device").hidden = $("gpu").value !== "(pasted)";
  $("given-layout").hidden = $("layout").value === "search";
  $("adapters").hidden = $("finetune").value === "full";
}

function changed() {
  shown();
  clearTimeout(timer);
  timer = setTimeout(ask, 250);
}

async function ask() {
  const q = query();
  const text = q.toString();
  // The address, the shareable link and the downloads carry the server's token, as the printed address does.
  const withToken = `${text ? text + "&" : ""}token=${encodeURIComponent(TOKEN)}`;
  history.replaceState(null, "", `?${withToken}`);
  $("share").value = `${location.origin}/?${withToken}`;
  $("csv").href = `/api/plan.csv?${withToken}`;
  $("json").href = `/api/plan.json?${withToken}`;
  const mine = ++asked;
  if (inFlight) inFlight.abort();
  inFlight = new AbortController();
  document.body.dataset.state = "busy";
  $("status").textContent = "planning…";
  let answer;
  try {
    const response = await fetch(`/api/plan?${text}`, { signal: inFlight.signal, headers: AUTH });
    answer = await response.json();
  } catch (err) {
    if (err.name === "AbortError") return;
    answer = { ok: false, error: `trainingcost serve: the server did not answer (${err.message})`, field: null };
  }
  if (mine !== asked) return;  // a later change is on its way
  show(answer, text);
}

function show(answer, text) {
  for (const el of document.querySelectorAll(".error")) el.textContent = "";
  for (const el of document.querySelectorAll(".invalid")) el.classList.remove("invalid");
  document.body.dataset.query = text;
  if (!answer.ok) {
    const where = answer.field && document.querySelector(`.error[data-for="${answer.field}"]`);
    (where || $("error")).textContent = answer.error;
    const input = answer.field && (answer.field === "rule" ? $("rules") : document.querySelector(`[name="${answer.field}"]`));
    if (input) input.classList.add("invalid");
    $("status").textContent = "not planned: see the message";
    document.body.dataset.state = "error";
    return;
  }
  const paragraphs = answer.text.split("\n\n");
  $("summary").textContent = paragraphs.slice(0, 2).join("\n\n");
  table(answer.header, answer.rows);
  $("notes").textContent = answer.notes.join(" ");
  memory(answer.memory);
  scaling(answer.scaling);
  $("cli").textContent = answer.cli;
  $("python").textContent = answer.python;
  $("text").textContent = answer.text;
  const list = $("assumptions");
  list.replaceChildren();
  for (const [label, source] of answer.assumptions) {
    const dt = document.createElement("dt"); dt.textContent = label;
    const dd = document.createElement("dd"); dd.textContent = source;
    list.append(dt, dd);
  }
  $("status").textContent = "";
  document.body.dataset.state = "ready";
}

function table(header, rows) {
  const head = $("plan-table").tHead, body = $("plan-table").tBodies[0];
  head.replaceChildren(); body.replaceChildren();
  const tr = head.insertRow();
  for (const title of header) { const th = document.createElement("th"); th.textContent = title; tr.appendChild(th); }
  for (const row of rows) {
    const line = body.insertRow();
    for (const cell of row) {
      const td = line.insertCell(); td.textContent = cell;
      if (cell === "NO") td.className = "no";
    }
  }
}

function node(name, attrs, text) {
  const el = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  if (text !== undefined) el.textContent = text;
  return el;
}

const GIB = 2 ** 30;

function memory(m) {
  let rows = m.rows;
  const counts = [...new Set(rows.map((r) => r.gpus))];
  if (counts.length > 1) rows = rows.filter((r) => r.gpus === counts[0]);
  $("memory-title").textContent = `Memory per GPU, by part (GiB, the most loaded GPU${counts.length > 1 ?
    `, at ${counts[0]} GPUs` : ""}; the line: the device's ${(m.capacity / GIB).toFixed(1)} GiB)`;
  const width = 640, left = 90, bar = 18, gap = 8, top = 24;
  const most = Math.max(m.capacity, ...rows.map((r) => r.total)) * 1.05;
  const x = (v) => left + (width - left - 10) * v / most;
  const height = top + rows.length * (bar + gap) + 20;
  const svg = node("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img",
                            "aria-label": "memory per GPU by part" });
  m.parts.forEach((part, i) => {
    svg.appendChild(node("rect", { x: left + i * 78, y: 4, width: 10, height: 10, fill: PART_COLOURS[i] }));
    svg.appendChild(node("text", { x: left + i * 78 + 13, y: 13 }, part));
  });
  rows.forEach((r, j) => {
    const y = top + j * (bar + gap);
    svg.appendChild(node("text", { x: 4, y: y + bar - 5 }, `${r.rule}${r.fits ? "" : " (NO)"}`));
    let at = 0;
    r.parts.forEach((value, i) => {
      if (!value) return;
      const rect = node("rect", { x: x(at), y, width: Math.max(0.5, x(at + value) - x(at)), height: bar,
                                  fill: PART_COLOURS[i] });
      rect.appendChild(node("title", {}, `${m.parts[i]}: ${(value / GIB).toFixed(2)} GiB`));
      svg.appendChild(rect);
      at += value;
    });
    svg.appendChild(node("text", { x: x(r.total) + 4, y: y + bar - 5 }, (r.total / GIB).toFixed(1)));
  });
  svg.appendChild(node("line", { x1: x(m.capacity), x2: x(m.capacity), y1: top - 4, y2: height - 14, stroke: "#b3261e",
                                 "stroke-dasharray": "4 3", "stroke-width": 1.5 }));
  svg.appendChild(node("text", { x: x(m.capacity) - 40, y: height - 3 }, "capacity"));
  $("memory").replaceChildren(svg);
}

function tick(v) {
  if (v >= 1e6) return `${(v / 1e6).toPrecision(3)}M`;
  if (v >= 1e3) return `${(v / 1e3).toPrecision(3)}k`;
  return v >= 10 ? v.toFixed(0) : v.toPrecision(2);
}

// Two panels: wall-clock against GPUs, and GPU-hours against wall-clock (both logarithmic), one line per rule.
function scaling(points) {
  const counts = [...new Set(points.map((p) => p.gpus))];
  $("scaling-block").hidden = counts.length < 2;
  if (counts.length < 2) { $("scaling").replaceChildren(); return; }
  const rules = [...new Set(points.map((p) => p.rule))];
  const panel = (xs, ys, xLabel, yLabel, xTicks) => {
    const width = 400, height = 270, l = 62, b = 42, t = 22, r = 26;
    const lx = xs.map(Math.log), ly = ys.map(Math.log);
    let [x0, x1] = [Math.min(...lx), Math.max(...lx)], [y0, y1] = [Math.min(...ly), Math.max(...ly)];
    if (y1 - y0 < 0.05) { y0 -= 0.05; y1 += 0.05; }  // a flat line: a visible band around it
    if (x1 - x0 < 0.05) { x0 -= 0.05; x1 += 0.05; }
    const sx = (v) => l + (width - l - r) * (Math.log(v) - x0) / (x1 - x0);
    const sy = (v) => height - b - (height - b - t) * (Math.log(v) - y0) / (y1 - y0);
    const svg = node("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img",
                              "aria-label": `${yLabel} against ${xLabel}` });
    svg.appendChild(node("text", { x: l, y: 12 }, `${yLabel} against ${xLabel} (log scales)`));
    svg.appendChild(node("line", { x1: l, x2: width - r, y1: height - b, y2: height - b, stroke: "#888" }));
    svg.appendChild(node("line", { x1: l, x2: l, y1: t, y2: height - b, stroke: "#888" }));
    svg.appendChild(node("text", { x: (l + width - r) / 2 - 14, y: height - 6 }, xLabel));
    for (let i = 0; i <= 3; i++) {
      const v = Math.exp(y0 + (y1 - y0) * i / 3);
      svg.appendChild(node("line", { x1: l - 4, x2: l, y1: sy(v), y2: sy(v), stroke: "#888" }));
      svg.appendChild(node("text", { x: l - 6, y: sy(v) + 4, "text-anchor": "end" }, tick(v)));
    }
    const xs2 = xTicks || [0, 1, 2, 3].map((i) => Math.exp(x0 + (x1 - x0) * i / 3));
    for (const v of xs2) {
      svg.appendChild(node("line", { x1: sx(v), x2: sx(v), y1: height - b, y2: height - b + 4, stroke: "#888" }));
      svg.appendChild(node("text", { x: sx(v), y: height - b + 16, "text-anchor": "middle" }, tick(v)));
    }
    return { svg, sx, sy };
  };
  const days = (p) => p.wall_clock_s / 86400;
  const a = panel(points.map((p) => p.gpus), points.map(days), "GPUs", "days", counts);
  const c = panel(points.map(days), points.map((p) => p.gpu_hours), "days", "GPU-hours");
  const legend = node("svg", { width: 800, height: 22, role: "img", "aria-label": "rules" });
  rules.forEach((rule, i) => {
    const colour = COLOURS[i % 10];
    const mine = points.filter((p) => p.rule === rule).sort((p, q) => p.gpus - q.gpus);
    for (const [pn, fx, fy] of [[a, (p) => p.gpus, days], [c, days, (p) => p.gpu_hours]]) {
      pn.svg.appendChild(node("polyline", { points: mine.map((p) => `${pn.sx(fx(p))},${pn.sy(fy(p))}`).join(" "),
                                            fill: "none", stroke: colour, "stroke-width": 2 }));
      for (const p of mine) {
        const dot = node("circle", { cx: pn.sx(fx(p)), cy: pn.sy(fy(p)), r: 3.5, fill: p.fits ? colour : "#fff",
                                     stroke: colour });
        dot.appendChild(node("title", {}, `${rule} on ${p.gpus} GPUs: ${days(p).toFixed(1)} days, ` +
                                           `${Math.round(p.gpu_hours)} GPU-hours${p.fits ? "" : " (does not fit)"}`));
        pn.svg.appendChild(dot);
      }
    }
    legend.appendChild(node("line", { x1: 62 + 90 * i, x2: 82 + 90 * i, y1: 11, y2: 11, stroke: colour,
                                      "stroke-width": 3 }));
    legend.appendChild(node("text", { x: 86 + 90 * i, y: 15 }, rule));
  });
  legend.appendChild(node("text", { x: 62 + 90 * rules.length, y: 15 }, "(an open dot: does not fit)"));
  $("scaling").replaceChildren(a.svg, c.svg, legend);
}

function copy(event) {
  const text = event.currentTarget.textContent;
  if (navigator.clipboard) navigator.clipboard.writeText(text).catch(() => {});
  const range = document.createRange();
  range.selectNodeContents(event.currentTarget);
  getSelection().removeAllRanges(); getSelection().addRange(range);
}

async function start() {
  const response = await fetch("/api/options", { headers: AUTH });
  setUp(await response.json());
  load(new URLSearchParams(location.search));
  $("form").addEventListener("input", changed);
  $("form").addEventListener("change", changed);
  $("form").addEventListener("submit", (e) => { e.preventDefault(); ask(); });
  for (const el of document.querySelectorAll(".copy")) el.addEventListener("click", copy);
  const q = new URLSearchParams(location.search);
  if (q.get("preset") || q.get("hf_config")) ask();
  else $("status").textContent = "choose a preset or paste a config.json, then the run: the plan follows each change";
}

start();
