// The Coach dashboard's script: draws the state the page came with (#initial-state) as it
// loads, then polls /api/state; draws nodes (a lost one marked), jobs newest first, each job's
// loss and accuracy curves (SVG: every finished epoch, and the current epoch's progress as the
// polls see it) and its history with the changes marked. With the scheduler started
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
// A figure not there yet (a queued job's loss, an accuracy before the first epoch ends): '—'.
const fmt = (v, d = 4) => (v === null || v === undefined || Number.isNaN(v)) ? '\u2014' : Number(v).toFixed(d);
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

// Where the epoch axis is labelled: every epoch while the labels fit (up to 15), else every
// 2nd, 5th, 10th, ... epoch.
function epochStep(x1) {
  for (const m of [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000])
    if (x1 / m <= 15) return m;
  return Math.ceil(x1 / 15);
}

// One panel: `series` [{name, color, points: [[x, y]], cls, dot}] (x in epochs: epoch k ends at
// x = k; a point in between is that far into the epoch), `marks` [x] drawn dashed. `empty`: what
// the panel says while it has no point.
function curve(title, series, marks, cls, empty) {
  const w = 420, h = 200, l = 48, r = 10, t = 22, b = 24;
  const svg = svgEl('svg', {width: w, height: h, class: 'curve ' + cls});
  series = series.map(s => ({...s, points: s.points.filter(p => p[1] !== null && p[1] !== undefined)}));
  const all = series.flatMap(s => s.points);
  const t0 = svgEl('text', {x: l, y: 14, 'font-size': 12});
  t0.textContent = title;
  svg.appendChild(t0);
  if (all.length === 0) {
    const note = svgEl('text', {x: w / 2, y: h / 2, 'font-size': 12, 'text-anchor': 'middle', fill: '#889', class: 'empty'});
    note.textContent = empty;
    svg.appendChild(note);
    return svg;
  }
  const xs = all.map(p => p[0]), ys = all.map(p => p[1]);
  const x0 = 0, x1 = Math.max(Math.ceil(Math.max(...xs)), 1);
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
  // The epoch axis: a tick at every epoch (while they are more than 3 px apart), labelled at
  // every epochStep-th.
  const step = epochStep(x1);
  for (let e = 0; e <= x1; e++) {
    const labelled = e % step === 0;
    if (!labelled && (w - l - r) / x1 < 3) continue;
    svg.appendChild(svgEl('line', {x1: px(e), x2: px(e), y1: h - b, y2: h - b + (labelled ? 5 : 3), stroke: '#999'}));
    if (!labelled) continue;
    const tx = svgEl('text', {x: px(e), y: h - b + 15, 'font-size': 10, 'text-anchor': 'middle', class: 'epoch-label'});
    tx.textContent = String(e);
    svg.appendChild(tx);
  }
  const xl = svgEl('text', {x: l - 4, y: h - 4, 'font-size': 10, 'text-anchor': 'end'});
  xl.textContent = 'epoch';
  svg.appendChild(xl);
  for (const m of marks)
    svg.appendChild(svgEl('line', {class: 'change', x1: px(m), x2: px(m), y1: t, y2: h - b,
                                   stroke: '#d62728', 'stroke-dasharray': '4,3'}));
  series.forEach((s, i) => {
    if (s.points.length === 0) return;
    svg.appendChild(svgEl('polyline', {fill: 'none', stroke: s.color, 'stroke-width': s.dot ? 1 : 2,
                                       class: s.cls || 'epochs',
                                       points: s.points.map(p => px(p[0]) + ',' + py(p[1])).join(' ')}));
    if (s.points.length <= 30)  // few points (a short job): each one visible
      for (const [x, y] of s.points)
        svg.appendChild(svgEl('circle', {cx: px(x), cy: py(y), r: 2, fill: s.color, class: 'point'}));
    if (s.dot) {  // where the job is now
      const [x, y] = s.points[s.points.length - 1];
      svg.appendChild(svgEl('circle', {cx: px(x), cy: py(y), r: 3, fill: s.color, class: 'now'}));
    }
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

// Each job's current-epoch points as the polls saw them since the page loaded ([epoch, loss]),
// so the loss curve moves between epochs' ends; the points of an epoch that ended stay drawn.
const livePoints = new Map();
function liveTrace(j) {
  const pts = livePoints.get(j.job) || [];
  if (j.live && (pts.length === 0 || pts[pts.length - 1][0] !== j.live.epoch))
    pts.push([j.live.epoch, j.live.train_loss]);
  while (pts.length > 2000) pts.shift();
  livePoints.set(j.job, pts);
  return pts;
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
  for (const n of s.nodes) {
    // A lost node (no heartbeat) is marked so until the scheduler's page drops it (10 minutes).
    const st = n.state || (n.alive ? (n.draining ? 'draining' : 'alive') : 'lost');
    const text = st === 'lost' ? 'lost (last seen ' + Math.round(n.seconds_since_heartbeat || 0) + ' s ago)' : st;
    nodes.appendChild(row([n.name, n.address, el('span', {class: 'state-' + st}, text),
                           fmt(n.cpus_free, 1) + ' / ' + n.cpus_total, fmt(n.cpus_external, 1), gib(n.memory_free) + ' / ' + gib(n.memory_total),
                           n.gpus_free + ' / ' + n.gpus_total, n.parts], {class: 'node', 'data-name': n.name, 'data-state': st}));
  }
  const jobs = document.querySelector('#jobs tbody');
  jobs.textContent = '';
  const details = document.getElementById('details');
  details.textContent = '';
  // Newest first (the scheduler sends them so; kept here for any other source of state).
  for (const j of [...s.jobs].sort((a, b) => b.job - a.job)) {
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
    const live = liveTrace(j);
    card.appendChild(curve('loss', [
      {name: 'training', color: '#1f77b4', points: j.curve.map(e => [e.epoch, e.train_loss])},
      {name: 'test', color: '#ff7f0e', points: j.curve.map(e => [e.epoch, e.test_loss])},
      {name: 'training, this epoch', color: '#6baed6', points: live, cls: 'live', dot: true}], marks, 'loss',
      j.state === 'queued' ? 'not started' : 'no loss yet'));
    card.appendChild(curve('test accuracy', [
      {name: 'accuracy', color: '#2ca02c', points: j.curve.map(e => [e.epoch, e.test_accuracy])}], marks, 'accuracy',
      j.state === 'queued' ? 'not started' : 'measured as epoch 1 ends'));
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

// The state the page came with, drawn before anything else (no blank page until the first poll).
const initial = (() => {
  try {
    return JSON.parse(document.getElementById('initial-state')?.textContent || 'null');
  } catch (e) {
    return null;  // then the first poll draws it
  }
})();

async function refresh() {
  try {
    const r = await fetch('/api/state');
    if (!r.ok) throw new Error(r.status + ' ' + (await r.text()));
    render(await r.json());
  } catch (e) {
    document.getElementById('updated').textContent = 'no answer from the scheduler: ' + e.message;
  }
}
if (initial) render(initial); else refresh();
setInterval(refresh, 2000);
