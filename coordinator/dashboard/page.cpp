// The dashboard's page and script (page.hpp).
#include "page.hpp"

#include <string>

#include "starling/coordinator/report.hpp"

namespace starling::coordinator {

namespace {

constexpr std::string_view kHead = R"html(<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>Starling dashboard</title>
<style>)html";

constexpr std::string_view kBody = R"html(
#conn { float: right; }
td.assigned { color: #1f77b4; } td.returned { color: #9467bd; } td.accepted { color: #2ca02c; }
td.rejected, td.dropped, td.late-discarded { color: #d62728; } td.straggler, td.late-applied { color: #ff7f0e; }
</style></head>
<body>
<span id="conn" class="sub">connecting...</span>
<h1 id="title">Starling dashboard</h1>
<p class="sub" id="task"></p>
<div class="cards">
  <div class="card">status<b id="status">-</b></div>
  <div class="card">round<b id="round">-</b></div>
  <div class="card">committed / abandoned<b id="committed">-</b></div>
  <div class="card">test metric<b id="metric">-</b></div>
  <div class="card">clients connected<b id="connected">-</b></div>
  <div class="card">last round up / down<b id="bytes">-</b></div>
  <div class="card">troubled clients<b id="troubled">-</b></div>
  <div class="card">refused at Hello<b id="refusals">-</b></div>
  <div class="card" id="privacy-card" hidden>epsilon spent<b id="epsilon">-</b></div>
</div>
<h2>Participants of the open and the newest rounds</h2>
<table id="participants"><thead><tr><th>round</th><th>client</th><th>state</th><th>reason</th>
<th>assigned</th><th>returned after</th><th>deadline in</th></tr></thead><tbody></tbody></table>
<h2>Plots</h2>
<div id="plots"><p class="sub">no round recorded yet</p></div>
<h2>Stragglers, drops and rejections by client</h2>
<table id="stragglers"><thead><tr><th>client</th><th>straggler</th><th>dropped</th><th>rejected</th>
<th>late applied</th><th>late discarded</th><th>last round</th><th>last outcome</th><th>its reason</th></tr></thead>
<tbody></tbody></table>
<h2>Connected clients</h2>
<table id="clients"><thead><tr><th>client</th><th>role</th><th>address</th><th>examples</th><th>connected for</th>
</tr></thead><tbody></tbody></table>
<h2>Recently refused at Hello</h2>
<table id="refused"><thead><tr><th>at</th><th>client</th><th>from</th><th>reason</th></tr></thead><tbody></tbody></table>
<script src="/dashboard.js"></script>
</body></html>
)html";

constexpr std::string_view kScript = R"js(// Starling's dashboard: polls /api/state, redraws the page.
'use strict';
let plotsVersion = -1;

function fill(id, rows) {
  const body = document.querySelector('#' + id + ' tbody');
  body.replaceChildren();
  for (const row of rows) {
    const tr = document.createElement('tr');
    for (const cell of row) {
      const td = document.createElement('td');
      if (cell !== null && typeof cell === 'object') {
        td.textContent = cell.text;
        td.className = cell.cls;
      } else {
        td.textContent = cell === null || cell === undefined ? '' : String(cell);
        if (typeof cell === 'number') td.className = 'n';
      }
      tr.appendChild(td);
    }
    body.appendChild(tr);
  }
}

function text(id, value) { document.getElementById(id).textContent = value; }
function seconds(ms) { return ms === null || ms === undefined ? '' : (ms / 1000).toFixed(1) + ' s'; }
function bytes(b) {
  if (b < 1024) return b + ' B';
  if (b < 1048576) return (b / 1024).toFixed(1) + ' KiB';
  if (b < 1073741824) return (b / 1048576).toFixed(1) + ' MiB';
  return (b / 1073741824).toFixed(2) + ' GiB';
}
function clock(ms) { return new Date(ms).toISOString().replace('T', ' ').slice(0, 19); }

function draw(s) {
  const t = s.task;
  text('title', 'Starling: ' + t.name);
  text('task', t.model + ' | ' + t.kind + ' | ' + t.mode + ' | ' + (t.rounds ? t.rounds + ' rounds' : 'no round limit') +
      ' | ' + t.clients_per_round + ' clients a round' + (t.privacy ? ' | differentially private' : '') +
      ' | ' + t.database);
  text('status', s.status + (s.finished ? ' (' + s.finished + ')' : ''));
  text('round', s.round);
  text('committed', s.rounds_committed + ' / ' + s.rounds_abandoned);
  const e = s.evaluation;
  text('metric', !e ? '-' : e.accuracy !== null ? (100 * e.accuracy).toFixed(2) + '% (round ' + e.round + ')'
      : e.rmse !== null ? 'RMSE ' + e.rmse.toPrecision(4) + ' (round ' + e.round + ')'
      : e.loss !== null ? 'loss ' + e.loss.toFixed(4) : '-');
  text('connected', s.clients.connected);
  const last = s.last_round;
  text('bytes', last ? bytes(last.bytes_up_wire) + ' / ' + bytes(last.bytes_down_wire) : '-');
  text('troubled', s.stragglers.clients);
  text('refusals', s.refused.total);
  document.getElementById('privacy-card').hidden = !t.privacy;
  text('epsilon', last && last.epsilon !== null ? Number(last.epsilon).toPrecision(4) : '-');
  fill('participants', s.participants.map(p => [p.round, p.client, {text: p.state, cls: p.state}, p.reason,
      clock(p.assigned_ms), p.returned_ms === null ? '' : seconds(p.returned_ms - p.assigned_ms),
      p.returned_ms === null && p.state === 'assigned' ? seconds(Math.max(0, p.deadline_ms - s.now_ms)) : '']));
  fill('stragglers', s.stragglers.list.map(c => [c.client, c.straggler, c.dropped, c.rejected, c.late_applied,
      c.late_discarded, c.last_round, {text: c.last_outcome, cls: c.last_outcome}, c.last_reason]));
  fill('clients', s.clients.list.map(c => [c.id, c.role, c.address, c.examples, seconds(s.now_ms - c.since_ms)]));
  fill('refused', s.refused.recent.map(r => [clock(r.at_ms), r.client_id, r.peer, r.reason]));
}

async function plots(version) {
  const response = await fetch('/api/plots.svg', {cache: 'no-store'});
  if (!response.ok) return;
  document.getElementById('plots').innerHTML = await response.text();
  plotsVersion = version;
}

async function poll() {
  try {
    const response = await fetch('/api/state', {cache: 'no-store'});
    if (!response.ok) throw new Error('HTTP ' + response.status);
    const s = await response.json();
    draw(s);
    if (s.plots_version !== plotsVersion && s.plots_version > 0) await plots(s.plots_version);
    text('conn', 'updated ' + clock(s.now_ms) + ' UTC');
  } catch (err) {
    text('conn', 'no answer from the coordinator (' + err.message + ')');
  }
  setTimeout(poll, 1000);
}
poll();
)js";

}  // namespace

std::string_view dashboardPage() {
  static const std::string page = std::string(kHead) + std::string(pageStyle()) + std::string(kBody);
  return page;
}

std::string_view dashboardScript() {
  return kScript;
}

}  // namespace starling::coordinator
