// The sluice status page. It polls the admin endpoint's JSON views and draws
// them; it loads nothing from anywhere else.
//
// Rule names and keys come from clients, so every piece of data reaches the
// page through textContent or setAttribute, never as HTML.
'use strict';

const WINDOW_MS = 2 * 60 * 1000; // how much of the chart's history to keep
const COLORS = ['#1c7ed6', '#e8590c', '#2b8a3e', '#ae3ec9', '#c2255c', '#0b7285', '#5c940d', '#862e9c'];
const CHART = {width: 720, height: 240, left: 52, right: 12, top: 12, bottom: 26}; // matches the svg's viewBox

const $ = (id) => document.getElementById(id);
const SVG_NS = $('chart').namespaceURI; // taken from the page's own <svg>

// el and svgEl build an element; string children become text nodes.
function build(e, attrs, children) {
  for (const [k, v] of Object.entries(attrs)) {
    if (v !== undefined && v !== null && v !== false) e.setAttribute(k, v);
  }
  e.append(...children);
  return e;
}
const el = (tag, attrs, ...children) => build(document.createElement(tag), attrs, children);
const svgEl = (tag, attrs, ...children) => build(document.createElementNS(SVG_NS, tag), attrs, children);

function fmt(v) {
  return v.toLocaleString('en', {maximumFractionDigits: v < 10 ? 2 : 1});
}
const short = (hash) => (hash || '').slice(0, 12);
const pct = (used) => Math.round(used * 100) + '%';

// fillTable replaces a table's body with rows, or with one row saying empty.
function fillTable(id, rows, empty) {
  const table = $(id);
  if (rows.length === 0) {
    rows = [el('tr', {class: 'empty'}, el('td', {colspan: table.tHead.rows[0].cells.length}, empty))];
  }
  table.tBodies[0].replaceChildren(...rows);
}

async function getJSON(path) {
  const r = await fetch(path, {cache: 'no-store'});
  if (!r.ok) throw new Error(`${path}: HTTP ${r.status}`);
  return r.json();
}

// Errors are kept per view, so that one view's success does not hide
// another's failure.
const errors = new Map();
function report(view, err) {
  if (err) errors.set(view, `${view}: ${err.message || err}`);
  else errors.delete(view);
  $('error').textContent = [...errors.values()].join('; ');
}
window.addEventListener('error', (e) => report('script', e.message));
document.addEventListener('securitypolicyviolation', (e) => report('policy', `blocked ${e.blockedURI || e.violatedDirective}`));

// every runs poll now and then ms after each run ends, so that a slow
// endpoint never has two requests in flight.
function every(ms, view, poll) {
  const run = async () => {
    try {
      await poll();
      report(view, null);
    } catch (err) {
      report(view, err);
    }
    setTimeout(run, ms);
  };
  run();
}

function showNode(name) {
  $('node').textContent = name;
  document.title = `sluice status: ${name}`;
}

// gossipCell says how a member gossips, as `sluice members` does.
function gossipCell(mb, clustered) {
  if (!clustered || mb.state !== 'alive') return '';
  if (mb.encrypted === undefined) return '?';
  if (!mb.encrypted) return 'PLAINTEXT: no key';
  return mb.labelled === false ? 'encrypted, no label' : 'encrypted';
}

async function pollMembers() {
  const m = await getJSON('v1/members');
  showNode(m.self);
  const banner = $('drift');
  banner.hidden = !m.drift;
  banner.textContent = m.drift
    ? `Rules drift: some alive members run rules other than this node's (${short(m.rules_hash)}); they decide the same keys under other limits.`
    : '';
  fillTable('members', m.members.map((mb) => el('tr',
    {'data-member': mb.name, class: [mb.drift && 'drift', mb.state !== 'alive' && 'gone'].filter(Boolean).join(' ') || null},
    el('td', {}, mb.name, mb.self ? ' (this node)' : ''),
    el('td', {}, mb.addr || ''),
    el('td', {}, mb.state),
    el('td', {}, mb.version || ''),
    el('td', {class: 'hash', title: mb.rules_hash || ''}, short(mb.rules_hash)),
    el('td', {class: 'flag'}, mb.drift ? 'DRIFT: other rules' : ''),
    el('td', {class: mb.encrypted === false ? 'plain' : null}, gossipCell(mb, m.clustered)),
    el('td', {}, mb.gone_since || ''),
  )), 'no members');
}

function ruleMode(r) {
  const modes = [];
  if (r.shadow) modes.push('shadow (never denies)');
  if (r.soft_percent) modes.push(`soft, +${r.soft_percent}% of burst`);
  return modes.join(', ') || 'enforce';
}

async function pollRules() {
  const rs = await getJSON('v1/rules');
  $('rules-source').textContent = `From ${rs.source}, hash ${short(rs.hash)}; requests naming an unknown rule: ${rs.unknown_rule}.`;
  fillTable('rules', rs.rules.map((r) => el('tr', {'data-rule': r.name},
    el('td', {}, r.name),
    el('td', {}, (r.limits || [r]).map((l) => `${l.limit} / ${l.period}`).join(' + ')),
    el('td', {}, (r.limits || [r]).map((l) => l.algorithm).join(' + ')),
    el('td', {}, String(r.burst)),
    el('td', {}, String(r.overrides)),
    el('td', {}, ruleMode(r)),
  )), 'no rules');
}

async function pollTop() {
  const top = await getJSON('v1/top?n=10');
  fillTable('top-keys', top.keys.map((k) => el('tr', {'data-rule': k.rule, 'data-key': k.key, class: k.used > 1 && 'debt'},
    el('td', {}, k.rule),
    el('td', {class: 'key'}, k.key),
    el('td', {}, el('meter', {min: 0, max: 1, low: 0.5, high: 0.9, optimum: 0, value: Math.min(k.used, 1)}), ` ${pct(k.used)}`),
    el('td', {}, `${fmt(k.balance)} / ${k.burst}`),
  )), 'no key has spent any of its burst');
}

// The chart's data: the previous cumulative sample of /v1/stats, and one
// point of per-second rates per rule for each poll since, within WINDOW_MS.
let previous = null; // {t, rules}
const points = []; // {t, rates: {rule: {admitted, throttled}}}
const colors = new Map(); // rule -> colour, kept as rules come and go

function colorOf(rule) {
  if (!colors.has(rule)) colors.set(rule, COLORS[colors.size % COLORS.length]);
  return colors.get(rule);
}

async function pollStats() {
  const stats = await getJSON('v1/stats');
  const now = performance.now();
  showNode(stats.node);
  const dt = previous ? (now - previous.t) / 1000 : 0;
  if (dt > 0) {
    const rates = {};
    for (const [rule, c] of Object.entries(stats.rules)) {
      const p = previous.rules[rule];
      if (!p || c.admitted < p.admitted || c.throttled < p.throttled) continue; // a new rule, or a restarted daemon
      rates[rule] = {admitted: (c.admitted - p.admitted) / dt, throttled: (c.throttled - p.throttled) / dt};
    }
    points.push({t: now, rates});
    while (points[0].t < now - WINDOW_MS) points.shift();
  }
  previous = {t: now, rules: stats.rules};
  drawChart(now);
  drawLegend(stats.rules);
  $('updated').textContent = `updated ${new Date().toLocaleTimeString()}`;
}

// niceCeil rounds a chart's top up to 1, 2 or 5 times a power of ten.
function niceCeil(v) {
  if (v <= 0) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  return [1, 2, 5, 10].map((m) => m * p).find((m) => m >= v);
}

function drawChart(now) {
  const c = CHART;
  const rules = [...new Set(points.flatMap((p) => Object.keys(p.rates)))].sort();
  let highest = 0;
  for (const p of points) {
    for (const r of Object.values(p.rates)) highest = Math.max(highest, r.admitted, r.throttled);
  }
  const top = niceCeil(highest);
  const x = (t) => c.left + (c.width - c.left - c.right) * (1 - (now - t) / WINDOW_MS);
  const y = (v) => c.height - c.bottom - (c.height - c.top - c.bottom) * (v / top);

  const parts = [];
  for (const v of [0, top / 2, top]) {
    parts.push(svgEl('line', {class: 'grid', x1: c.left, x2: c.width - c.right, y1: y(v), y2: y(v)}));
    parts.push(svgEl('text', {class: 'axis', x: c.left - 6, y: y(v) + 4, 'text-anchor': 'end'}, `${fmt(v)}/s`));
  }
  for (const [label, ago, anchor] of [['2 min ago', WINDOW_MS, 'start'], ['1 min ago', WINDOW_MS / 2, 'middle'], ['now', 0, 'end']]) {
    parts.push(svgEl('text', {class: 'axis', x: x(now - ago), y: c.height - 8, 'text-anchor': anchor}, label));
  }
  for (const rule of rules) {
    const mine = points.filter((p) => p.rates[rule]);
    for (const outcome of ['admitted', 'throttled']) {
      const xy = mine.map((p) => [x(p.t), y(p.rates[rule][outcome])]);
      const attrs = {'data-rule': rule, 'data-outcome': outcome, stroke: colorOf(rule)};
      parts.push(svgEl('polyline', {...attrs, class: `series ${outcome}`, 'data-points': xy.length,
        points: xy.map(([px, py]) => `${px.toFixed(1)},${py.toFixed(1)}`).join(' ')}));
      const [lx, ly] = xy[xy.length - 1]; // so that a lone first point shows too
      parts.push(svgEl('circle', {...attrs, class: `latest ${outcome}`, cx: lx, cy: ly, r: 2.5, fill: colorOf(rule)}));
    }
  }
  const chart = $('chart');
  chart.replaceChildren(...parts);
  chart.setAttribute('data-points', points.length);
}

function drawLegend(totals) {
  const latest = points.length ? points[points.length - 1].rates : {};
  $('legend').replaceChildren(...Object.keys(totals).sort().map((rule) => {
    const t = totals[rule];
    const r = latest[rule];
    const swatch = svgEl('svg', {class: 'swatch', viewBox: '0 0 20 10', 'aria-hidden': 'true'},
      svgEl('line', {x1: 0, y1: 5, x2: 20, y2: 5, stroke: colorOf(rule)}));
    const rates = r ? `${fmt(r.admitted)}/s admitted, ${fmt(r.throttled)}/s throttled` : 'rates after the next poll';
    const extra = [t.shadow_throttled && `${t.shadow_throttled} shadow-throttled`, t.soft && `${t.soft} soft`].filter(Boolean);
    return el('li', {
      'data-rule': rule,
      'data-admitted-rate': r && r.admitted, 'data-throttled-rate': r && r.throttled,
      'data-admitted-total': t.admitted, 'data-throttled-total': t.throttled,
    }, swatch, el('strong', {}, rule), ` ${rates}; since start ${[`${t.admitted} admitted`, `${t.throttled} throttled`, ...extra].join(', ')}`);
  }));
}

every(1000, 'stats', pollStats);
every(2000, 'top keys', pollTop);
every(5000, 'members', pollMembers);
every(5000, 'rules', pollRules);
