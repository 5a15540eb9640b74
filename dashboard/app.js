// The Coach dashboard's script: polls /api/state, draws nodes, jobs, each job's loss and
// accuracy curves (SVG) and its history with the changes marked. With the scheduler started
// with --dashboard-admin, the state says so and the page offers the policy and cancel actions
// (POST /api/policy, /api/cancel); otherwise it only reads.
'use strict';

// The admin token (`coach dashboard-token`), given once as http://HOST:PORT/#token=TOKEN: kept
// for this tab (sessionStorage) and taken out of the address bar, sent with every action.
const adminToken = (() => {
  const m = /(?:^#|&)token=([0-9a-f]{64})/.exec(location.hash);
  if (m) {
    sessionStorage.setItem('coach-admin-token', m[1]);
    history.replaceState(null, '', location.pathname + location.search);
  }
  return sessionStorage.getItem('coach-admin-token') || '';
})();

const el = (tag, attrs = {}, text) => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
};
const svgEl = (tag, attrs = {}) => {
  const e = document.createElementNS('http://www.w3.org/2000/svg', tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  return e;
};
const fmt = (v, d = 4) => (v === null || v === undefined || Number.isNaN(v)) ? '-' : Number(v).toFixed(d);
const gib = b => (b / 2 ** 30).toFixed(1) + ' GiB';

function row(cells, attrs) {
  const tr = el('tr', attrs);
  for (const c of cells) {
    const td = el('td');
    if (c instanceof Node) td.appendChild(c); else td.textContent = c;
    tr.appendChild(td);
  }
  return tr;
}

// One panel: `series` [{name, color, points: [[x, y]]}], `marks` [x] drawn dashed.
function curve(title, series, marks, cls) {
  const w = 420, h = 200, l = 48, r = 10, t = 22, b = 24;
  const svg = svgEl('svg', {width: w, height: h, class: 'curve ' + cls});
  const all = series.flatMap(s => s.points);
  const t0 = svgEl('text', {x: l, y: 14, 'font-size': 12});
  t0.textContent = title;
  svg.appendChild(t0);
  if (all.length === 0) return svg;
  const xs = all.map(p => p[0]), ys = all.map(p => p[1]);
  const x0 = Math.min(...xs, 0), x1 = Math.max(...xs, 1);
  let y0 = Math.min(...ys), y1 = Math.max(...ys);
  if (y1 - y0 < 1e-9) { y0 -= 0.05; y1 += 0.05; }
  const px = x => l + (x - x0) / (x1 - x0) * (w - l - r);
  const py = y => t + (1 - (y - y0) / (y1 - y0)) * (h - t - b);
  svg.appendChild(svgEl('rect', {x: l, y: t, width: w - l - r, height: h - t - b, fill: 'none', stroke: '#ccc'}));
  for (const v of [y0, (y0 + y1) / 2, y1]) {
    const tx = svgEl('text', {x: l - 4, y: py(v) + 4, 'font-size': 10, 'text-anchor': 'end'});
    tx.textContent = v.toFixed(3);
    svg.appendChild(tx);
  }
  const xl = svgEl('text', {x: w - r, y: h - 6, 'font-size': 10, 'text-anchor': 'end'});
  xl.textContent = 'epoch ' + x1;
  svg.appendChild(xl);
  for (const m of marks)
    svg.appendChild(svgEl('line', {class: 'change', x1: px(m), x2: px(m), y1: t, y2: h - b,
                                   stroke: '#d62728', 'stroke-dasharray': '4,3'}));
  series.forEach((s, i) => {
    svg.appendChild(svgEl('polyline', {fill: 'none', stroke: s.color, 'stroke-width': 2,
                                       points: s.points.map(p => px(p[0]) + ',' + py(p[1])).join(' ')}));
    const lg = svgEl('text', {x: w - r - 4, y: t + 14 + 14 * i, 'font-size': 11, fill: s.color, 'text-anchor': 'end'});
    lg.textContent = s.name;
    svg.appendChild(lg);
  });
  return svg;
}

async function post(path, body) {
  const headers = {'X-Coach-Dashboard': '1'};
  if (adminToken) headers['X-Coach-Token'] = adminToken;
  const r = await fetch(path, {method: 'POST', body, headers});
  const text = await r.text();
  if (!r.ok) alert(text);
  refresh();
}

function render(s) {
  document.getElementById('policy').textContent = s.policy;
  const admin = document.getElementById('admin');
  admin.textContent = '';
  if (s.admin) {
    const sel = el('select', {id: 'policy-select'});
    for (const p of ['fifo', 'elastic-fifo', 'round-robin', 'coach']) {
      const o = el('option', {value: p}, p);
      if (p === s.policy) o.selected = true;
      sel.appendChild(o);
    }
    const b = el('button', {}, 'set policy');
    b.onclick = () => post('/api/policy', sel.value);
    admin.append(sel, b);
  } else {
    admin.appendChild(el('span', {class: 'muted'}, 'read-only'));
  }
  const nodes = document.querySelector('#nodes tbody');
  nodes.textContent = '';
  for (const n of s.nodes)
    nodes.appendChild(row([n.name, n.address, el('span', {class: 'state-' + (n.alive ? 'alive' : 'dead')}, n.alive ? (n.draining ? 'draining' : 'alive') : 'dead'),
                           fmt(n.cpus_free, 1) + ' / ' + n.cpus_total, fmt(n.cpus_external, 1), gib(n.memory_free) + ' / ' + gib(n.memory_total),
                           n.gpus_free + ' / ' + n.gpus_total, n.parts], {class: 'node', 'data-name': n.name}));
  const jobs = document.querySelector('#jobs tbody');
  jobs.textContent = '';
  const details = document.getElementById('details');
  details.textContent = '';
  for (const j of s.jobs) {
    const state = el('span', {class: 'state-' + j.state}, j.state);
    const cells = [String(j.job), j.name, state, j.epochs_done + '/' + j.epochs_total, fmt(j.test_accuracy),
                   fmt(j.loss), fmt(j.samples_per_s, 0), String(j.workers), String(j.shards), j.placement || '-', j.waiting || ''];
    const tr = row(cells, {class: 'job', 'data-job': j.job});
    if (s.admin && (j.state === 'running' || j.state === 'queued' || j.state === 'suspended')) {
      const b = el('button', {}, 'cancel');
      b.onclick = () => post('/api/cancel', String(j.job));
      tr.lastChild.appendChild(b);
    }
    jobs.appendChild(tr);
    const card = el('div', {class: 'job-card', id: 'job-' + j.job});
    card.appendChild(el('h3', {}, 'job ' + j.job + ' · ' + j.name + ' · ' + j.state));
    const marks = j.changes_at || [];
    card.appendChild(curve('loss', [
      {name: 'training', color: '#1f77b4', points: j.curve.map(e => [e.epoch, e.train_loss])},
      {name: 'test', color: '#ff7f0e', points: j.curve.map(e => [e.epoch, e.test_loss])}], marks, 'loss'));
    card.appendChild(curve('test accuracy', [
      {name: 'accuracy', color: '#2ca02c', points: j.curve.map(e => [e.epoch, e.test_accuracy])}], marks, 'accuracy'));
    // The timeline: every event but the epochs', of which the last five.
    const hist = el('div', {class: 'history'});
    const epochLine = /: epoch \d+\//;
    const epochs = j.events.filter(e => epochLine.test(e.text));
    const shown = new Set(epochs.slice(-5).map(e => e.seq));
    for (const e of j.events) {
      if (epochLine.test(e.text) && !shown.has(e.seq)) continue;
      const change = /change is in effect|placed on|take over|lost|restarts from/.test(e.text);
      hist.appendChild(el('div', change ? {class: 'change'} : {}, new Date(e.time * 1000).toLocaleTimeString() + '  ' + e.text));
    }
    card.appendChild(hist);
    details.appendChild(card);
    hist.scrollTop = hist.scrollHeight;
  }
  document.getElementById('updated').textContent = 'updated ' + new Date().toLocaleTimeString();
}

async function refresh() {
  try {
    const r = await fetch('/api/state');
    if (!r.ok) throw new Error(r.status + ' ' + (await r.text()));
    render(await r.json());
  } catch (e) {
    document.getElementById('updated').textContent = 'no answer from the scheduler: ' + e.message;
  }
}
refresh();
setInterval(refresh, 2000);
