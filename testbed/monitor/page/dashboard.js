// The lab's live dashboard: the topology from /api/topology, then /api/state once a
// second (what changed since the last time this page has): links coloured by their
// utilization, every switch port's queue, charts of the last minutes with the lab's
// events marked on them.
"use strict";

const WINDOW_S = 300;   // seconds of history the charts keep
const POLL_MS = 1000;
const state = { since: 0, topo: null, cy: null, charts: {}, series: {}, events: [],
                ports: {} };
window.testbedDashboard = state;  // for the browser test and the curious

function utilColour(u) {  // green through amber to red
  const stops = [[0, [46, 125, 50]], [0.5, [249, 168, 37]], [1, [198, 40, 40]]];
  u = Math.max(0, Math.min(1, u));
  const i = u <= 0.5 ? 0 : 1;
  const [u0, c0] = stops[i], [u1, c1] = stops[i + 1];
  const f = (u - u0) / (u1 - u0);
  return `rgb(${c0.map((c, k) => Math.round(c + f * (c1[k] - c))).join(",")})`;
}

// -- the topology ------------------------------------------------------------------------
function backbonePositions(topo) {
  // a schematic map: PoPs in columns by area, west to east; each region below its first PoP
  const pos = {};
  const pops = topo.nodes.filter(n => n.type === "pop");
  topo.areas.forEach((area, col) => {
    pops.filter(n => n.area === area).forEach((n, i) => {
      pos[n.id] = { x: 60 + col * 220 + (i % 2) * 90, y: 60 + i * 90 };
    });
  });
  const below = {};
  for (const r of topo.nodes.filter(n => n.type === "region")) {
    const home = pos[r.pops[0]] || { x: 0, y: 0 };
    below[r.pops[0]] = (below[r.pops[0]] || 0) + 1;
    pos[r.id] = { x: home.x + 40 * (below[r.pops[0]] - 1), y: home.y + 260 };
  }
  return pos;
}

function positions(topo) {
  if (topo.kind === "backbone") return backbonePositions(topo);
  // switches: one band per plane, tiers stacked (spines on top); hosts along the bottom
  const switches = topo.nodes.filter(n => n.type === "switch");
  const hosts = topo.nodes.filter(n => n.type === "host");
  const maxTier = Math.max(0, ...switches.map(n => n.tier));
  const planes = Math.max(1, topo.planes);
  const bandW = Math.max(260, 90 * Math.max(...[0, ...switches.map(n => n.index)]) + 200);
  const pos = {};
  for (let p = 0; p < planes; p++) {
    for (let t = 0; t <= maxTier; t++) {
      const row = switches.filter(n => n.plane === p && n.tier === t)
                          .sort((a, b) => a.index - b.index);
      row.forEach((n, i) => {
        pos[n.id] = { x: p * bandW + (i + 0.5) * bandW / row.length,
                      y: (maxTier - t) * 120 + 40 };
      });
    }
  }
  const width = planes * bandW;
  hosts.sort((a, b) => a.node - b.node).forEach((n, i) => {
    pos[n.id] = { x: (i + 0.5) * width / hosts.length, y: (maxTier + 1) * 120 + 60 };
  });
  return pos;
}

function drawTopology(topo) {
  const pos = positions(topo);
  const elements = topo.nodes.map(n => ({
    data: { id: n.id, label: n.id, type: n.type, role: n.role || n.type },
    position: pos[n.id] || { x: 0, y: 0 } }));
  for (const l of topo.links) {
    elements.push({ data: { id: l.id, source: l.a, target: l.b, kind: l.kind, util: 0,
                            up: 1, colour: utilColour(0) } });
  }
  state.cy = cytoscape({
    container: document.getElementById("graph"), elements, layout: { name: "preset" },
    autoungrabify: false,
    style: [
      { selector: "node", style: { label: "data(label)", "font-size": 11, "text-valign":
        "center", "text-halign": "center", width: 44, height: 22, shape: "round-rectangle",
        "background-color": "#eceff1", "border-width": 1, "border-color": "#607d8b" } },
      { selector: "node[type = 'host']", style: { shape: "ellipse", width: 34,
        "background-color": "#fff" } },
      { selector: "node[role = 'spine']", style: { "background-color": "#cfd8dc" } },
      { selector: "node[type = 'pop']", style: { shape: "ellipse", width: 48, height: 48,
        "background-color": "#e3f2fd" } },
      { selector: "node[type = 'region']", style: { shape: "round-rectangle", width: 70,
        "background-color": "#fff8e1" } },
      { selector: "edge", style: { width: 3, "line-color": "data(colour)",
        "curve-style": "bezier" } },
      { selector: "edge[kind = 'host']", style: { width: 2 } },
      { selector: "edge[up = 0]", style: { "line-color": "#9e9e9e", "line-style": "dashed" } },
    ],
  });
  state.cy.fit(undefined, 20);
}

// Every name and label comes from the scenario: it goes into the page as text only
// (textContent, never markup), and rows are found by a map, not a selector built from it.
function cells(row, texts, classes) {
  for (const t of texts) {
    const td = document.createElement("td");
    td.textContent = t === undefined || t === null ? "" : String(t);
    row.appendChild(td);
  }
  for (const c of classes) {
    const td = document.createElement("td");
    td.className = c;
    row.appendChild(td);
  }
}

function bar(row, kind) {  // <td class="bar KIND"><span></span><b></b></td>
  const td = document.createElement("td");
  td.className = `bar ${kind}`;
  td.append(document.createElement("span"), document.createElement("b"));
  row.appendChild(td);
}

const rows = { links: new Map(), ports: new Map() };

function updateLinks(links) {
  const body = document.querySelector("#links tbody");
  for (const l of state.topo.links) {
    const s = links[l.id];
    if (!s) continue;
    const edge = state.cy.getElementById(l.id);
    edge.data({ util: s.util, up: s.up ? 1 : 0, colour: utilColour(s.util) });
    let row = rows.links.get(l.id);
    if (!row) {
      row = document.createElement("tr");
      row.dataset.link = l.id;
      const where = l.plane !== undefined ? l.plane : `${l.km} km`;
      cells(row, [l.id, where, l.kind], ["ab", "ba", "st"]);
      body.appendChild(row);
      rows.links.set(l.id, row);
    }
    row.dataset.util = s.util;
    row.dataset.up = s.up ? "1" : "0";
    row.className = s.up ? "" : "down";
    row.querySelector(".ab").textContent = pct(s.ab);
    row.querySelector(".ba").textContent = pct(s.ba);
    row.querySelector(".st").textContent = s.up ? "up" : "DOWN";
  }
}

function pct(u) { return `${(100 * u).toFixed(1)} %`; }

function classText(classes, name) {  // "roce 12.0 KB, other 0.0 KB" where classes exist
  return Object.values(classes || {}).filter(c => c.port === name)
    .map(c => `${c.class} ${(c.backlog_bytes / 1000).toFixed(1)} KB`).join(", ");
}

function updatePorts(ports, classes) {
  const body = document.querySelector("#ports tbody");
  const limit = 1000 * (state.topo.queue_kb || 100);
  const names = Object.keys(ports).sort();
  for (const name of names) {
    const p = ports[name], meta = state.topo.ports[name] || {};
    let row = rows.ports.get(name);
    if (!row) {
      row = document.createElement("tr");
      row.dataset.port = name;
      cells(row, [meta.switch, meta.port, meta.role], []);
      bar(row, "util");
      bar(row, "queue");
      cells(row, [], ["classes", "drops", "st"]);
      body.appendChild(row);
      rows.ports.set(name, row);
    }
    row.dataset.util = p.util;
    row.dataset.backlog = p.backlog_bytes;
    row.className = p.up ? "" : "down";
    row.querySelector(".util span").style.width = `${Math.round(80 * p.util)}px`;
    row.querySelector(".util b").textContent = `${p.tx_mbps.toFixed(2)} Mb/s`;
    row.querySelector(".queue span").style.width =
      `${Math.round(80 * Math.min(1, p.backlog_bytes / limit))}px`;
    row.querySelector(".queue b").textContent = `${(p.backlog_bytes / 1000).toFixed(1)} KB`;
    row.querySelector(".classes").textContent = classText(classes, name);
    row.querySelector(".drops").textContent = p.queue_drops;
    row.querySelector(".st").textContent = p.up ? "up" : "DOWN";
  }
}

// -- the charts --------------------------------------------------------------------------
let CHARTS = {};  // the panels, as the monitor defines them (/api/topology)

function markEvents(u) {  // a vertical line at every event on the chart's time axis
  const ctx = u.ctx, top = u.bbox.top, h = u.bbox.height;
  ctx.save();
  for (const e of state.events) {
    const x = u.valToPos(e.t, "x", true);
    if (x < u.bbox.left || x > u.bbox.left + u.bbox.width) continue;
    ctx.strokeStyle = { fault: "#c62828", link: "#6a1b9a", routing: "#81c784" }[e.kind]
                      || "#90caf9";
    ctx.lineWidth = e.kind === "fault" ? 2 : 1;
    ctx.beginPath();
    ctx.moveTo(x, top);
    ctx.lineTo(x, top + h);
    ctx.stroke();
  }
  ctx.restore();
}

function makeCharts(boxes) {
  const width = Math.max(420, document.getElementById("right").clientWidth - 4);
  for (const [key, c] of Object.entries(CHARTS)) {
    state.series[key] = [[], ...c.series.map(() => [])];
    const opts = {
      title: c.title, width, height: 150,
      series: [{}, ...c.series.map(s => ({ label: s.label, stroke: s.colour, width: 1.5,
                                           spanGaps: false }))],
      axes: [{}, { size: 50 }], legend: { live: false },
      hooks: { draw: [markEvents] },
    };
    state.charts[key] = new uPlot(opts, state.series[key], boxes[key]);
  }
}

function addPoints(points) {
  for (const [key, c] of Object.entries(CHARTS)) {
    const data = state.series[key];
    for (const p of points) {
      data[0].push(p.t);
      c.series.forEach((s, i) => {
        const v = p[s.field];
        data[i + 1].push(v === null || v === undefined ? null : v * s.scale);
      });
    }
    const cut = data[0].findIndex(t => t >= data[0][data[0].length - 1] - WINDOW_S);
    if (cut > 0) data.forEach(arr => arr.splice(0, cut));
    state.charts[key].setData(data);
  }
}

function addEvents(events) {
  const list = document.getElementById("events");
  for (const e of events) {
    state.events.push(e);
    const li = document.createElement("li");
    li.className = e.kind;
    li.dataset.kind = e.kind;
    li.textContent = `${new Date(e.t * 1000).toLocaleTimeString()}  ${e.kind}: ${e.text}`;
    list.prepend(li);
  }
}

// -- the loop ----------------------------------------------------------------------------
async function poll() {
  const status = document.getElementById("status");
  try {
    const r = await fetch(`/api/state?since=${state.since}`, { cache: "no-store" });
    const s = await r.json();
    updateLinks(s.links);
    if (s.ports) updatePorts(s.ports, s.classes);
    addEvents(s.events);
    addPoints(s.points);
    if (s.points.length) state.since = s.points[s.points.length - 1].t;
    const clock = document.getElementById("clock");
    clock.dataset.t = s.t;
    clock.textContent = `sampled ${new Date(s.t * 1000).toLocaleTimeString()}`;
    state.polls = (state.polls || 0) + 1;
    status.textContent = "live";
    status.className = "live";
  } catch (err) {
    status.textContent = "no answer from the lab (is it down?)";
    status.className = "stale";
  }
  setTimeout(poll, POLL_MS);
}

async function main() {
  const r = await fetch("/api/topology");
  state.topo = await r.json();
  state.topo.ports = Object.fromEntries((state.topo.switch_ports || []).map(p => [p.ifname, p]));
  const topo = state.topo;
  document.getElementById("title").textContent = topo.kind === "backbone"
    ? `lab ${topo.lab}: backbone, ${topo.nodes.length} routers`
    : `lab ${topo.lab}: fabric, ${topo.planes} planes`;
  if (topo.kind === "backbone") document.getElementById("ports-box").hidden = true;
  document.title = `${state.topo.lab} - lab dashboard`;
  drawTopology(state.topo);
  CHARTS = Object.fromEntries(state.topo.panels.map(p => [p.key, p]));
  const right = document.getElementById("right");
  const boxes = {};
  for (const key of Object.keys(CHARTS)) {
    const div = document.createElement("div");
    div.className = "chart";
    div.dataset.chart = key;
    right.appendChild(div);
    boxes[key] = div;
  }
  makeCharts(boxes);
  poll();
}

main();
