// The sluice-rules web page: a team signs in with its token, sees its
// rules, edits one (checked by the service's dry run, with a diff preview,
// before saving) and sees the history, with one-step rollback.
//
// Safety: everything the service returns is put in the page as text
// (textContent, never innerHTML); the token lives in this tab's session
// storage and goes only in the Authorization header of same-origin API
// calls, never in a URL; the page is served with a CSP that allows only its
// own script and style files.
'use strict';

(() => {
  const TOKEN_KEY = 'sluice-rules-token';
  // The API is beside /ui/ (the service may sit behind a path prefix).
  const base = location.pathname.replace(/\/ui\/.*$/, '');

  const state = {
    token: null,
    who: null,
    team: null,
    editing: null, // {name, isNew, etag}
    preview: null, // {name, spec, del, loosens} the last successful check
    rollback: null, // {etag, loosens}
  };

  const $ = (id) => document.getElementById(id);

  // el makes an element; children are nodes or strings (inserted as text).
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      e.setAttribute(k, String(v));
    }
    for (const c of children) {
      e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
  }

  function clear(node) {
    while (node.firstChild) node.removeChild(node.firstChild);
  }

  function showError(msg) {
    $('error').textContent = msg || '';
    if (msg) $('notice').textContent = '';
  }

  function showNotice(msg) {
    $('notice').textContent = msg || '';
    if (msg) $('error').textContent = '';
  }

  // APIError carries the service's error detail ({code, message, problems,
  // loosenings, current_etag}).
  class APIError extends Error {
    constructor(status, detail) {
      super(detail.message || ('HTTP ' + status));
      this.status = status;
      this.detail = detail;
    }
  }

  // api calls the JSON API with the token; it returns {data, etag}.
  async function api(method, path, body, headers) {
    const h = Object.assign({ Accept: 'application/json', Authorization: 'Bearer ' + state.token }, headers || {});
    const init = { method, headers: h, cache: 'no-store', credentials: 'omit', redirect: 'error', referrerPolicy: 'no-referrer' };
    if (body !== undefined) {
      h['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    const resp = await fetch(base + path, init);
    const text = await resp.text();
    let data = null;
    try {
      data = text ? JSON.parse(text) : null;
    } catch (e) {
      data = null;
    }
    if (!resp.ok) {
      const detail = (data && data.error) || { code: String(resp.status), message: resp.status + ' ' + resp.statusText + (text ? ': ' + text.slice(0, 200) : '') };
      throw new APIError(resp.status, detail);
    }
    return { data, etag: resp.headers.get('ETag') };
  }

  const teamPath = (...parts) => '/v1/teams/' + parts.map(encodeURIComponent).join('/');

  function query(opts) {
    const q = new URLSearchParams();
    if (opts.dryRun) q.set('dry_run', 'true');
    if (opts.confirm) q.set('confirm', 'true');
    const s = q.toString();
    return s ? '?' + s : '';
  }

  // --- signing in and out

  async function signIn(token) {
    state.token = token;
    try {
      const { data } = await api('GET', '/v1/whoami');
      state.who = data;
    } catch (e) {
      state.token = null;
      sessionStorage.removeItem(TOKEN_KEY);
      showError(e.status === 401 ? 'That token is unknown or revoked.' : 'Sign in failed: ' + e.message);
      return;
    }
    sessionStorage.setItem(TOKEN_KEY, token);
    $('signin').hidden = true;
    $('team').hidden = false;
    $('signout').hidden = false;
    showError('');
    if (state.who.kind === 'admin') {
      $('who').textContent = 'admin (token ' + state.who.token_id + ')';
      await loadTeamPicker();
    } else {
      $('who').textContent = 'team ' + state.who.team + ' (token ' + state.who.token_id + ')';
      await openTeam(state.who.team);
    }
  }

  function signOut() {
    sessionStorage.removeItem(TOKEN_KEY);
    state.token = null;
    state.who = null;
    state.team = null;
    $('team').hidden = true;
    $('signin').hidden = false;
    $('signout').hidden = true;
    $('who').textContent = '';
    closeEditor();
    showNotice('Signed out.');
  }

  async function loadTeamPicker() {
    const { data } = await api('GET', '/v1/teams');
    const sel = $('team-select');
    clear(sel);
    for (const t of data.teams || []) sel.append(el('option', { value: t.name }, t.name));
    $('team-picker').hidden = false;
    if (sel.value) await openTeam(sel.value);
  }

  // --- the team's rules

  async function openTeam(team) {
    state.team = team;
    $('team-name').textContent = team;
    closeEditor();
    closeRollback();
    await Promise.all([loadRules(), loadHistory()]);
  }

  async function loadRules() {
    const { data, etag } = await api('GET', teamPath(state.team, 'rules'));
    $('team-version').textContent = String(data.version);
    $('rules').setAttribute('data-etag', etag || '');
    const body = $('rules').tBodies[0];
    clear(body);
    for (const r of data.rules || []) {
      const edit = el('button', { type: 'button', class: 'edit', 'data-rule': r.name }, 'Edit');
      edit.addEventListener('click', () => openEditor(r.name).catch(report));
      body.append(el('tr', { 'data-rule': r.name, 'data-version': r.version },
        el('td', { class: 'name' }, r.name),
        el('td', { class: 'served' }, r.served),
        el('td', { class: 'spec' }, el('pre', {}, r.spec)),
        el('td', { class: 'version' }, String(r.version)),
        el('td', {}, edit)));
    }
    $('no-rules').hidden = (data.rules || []).length > 0;
  }

  async function loadHistory() {
    const { data } = await api('GET', teamPath(state.team, 'history') + '?limit=50');
    const body = $('history').tBodies[0];
    clear(body);
    (data.entries || []).forEach((h, i) => {
      // The team's rules as of this version, folded; and, for any but the
      // newest, a way back to them.
      const rules = el('details', { class: 'document' }, el('summary', {}, 'rules'), el('pre', {}, h.document || ''));
      const actions = el('td', {}, rules);
      if (i > 0) {
        const back = el('button', { type: 'button', class: 'back', 'data-version': h.version }, 'Back to this version…');
        back.addEventListener('click', () => previewRollback(h.version));
        actions.append(back);
      }
      body.append(el('tr', { 'data-version': h.version, 'data-action': h.action, 'data-rule': h.rule || '' },
        el('td', {}, String(h.version)),
        el('td', {}, (h.at || '').replace('T', ' ').replace(/\.\d+/, '').replace('Z', '')),
        el('td', {}, h.actor),
        el('td', {}, h.token_id || '-'),
        el('td', {}, h.action),
        el('td', {}, h.rule || '-'),
        actions));
    });
    $('rollback').disabled = (data.entries || []).length === 0;
  }

  // --- editing one rule

  async function openEditor(name) {
    closeRollback();
    showNotice('');
    showError('');
    if (name === null) {
      state.editing = { name: '', isNew: true, etag: null };
      $('editor-title').textContent = 'New rule';
      $('edit-name').value = '';
      $('edit-name').readOnly = false;
      $('edit-spec').value = 'rate: 10/1s\nburst: 20\n';
      $('delete-rule').hidden = true;
    } else {
      const { data, etag } = await api('GET', teamPath(state.team, 'rules', name));
      state.editing = { name, isNew: false, etag };
      $('editor-title').textContent = 'Edit ' + name;
      $('edit-name').value = name;
      $('edit-name').readOnly = true;
      $('edit-spec').value = data.spec;
      $('delete-rule').hidden = false;
    }
    resetPreview();
    $('editor').hidden = false;
    $('edit-spec').focus();
  }

  function closeEditor() {
    state.editing = null;
    resetPreview();
    $('editor').hidden = true;
  }

  function resetPreview() {
    state.preview = null;
    $('save').disabled = true;
    $('save').textContent = 'Save';
    $('preview').hidden = true;
    $('confirm').checked = false;
    clear($('problems'));
    clear($('diff'));
    clear($('loosenings'));
  }

  // change sends the editor's change (a PUT of the spec, or a DELETE) with
  // If-Match, as a dry run or for real.
  function change(ed, name, spec, del, opts) {
    const headers = {};
    if (ed.isNew) headers['If-None-Match'] = '*';
    else if (ed.etag) headers['If-Match'] = ed.etag;
    const path = teamPath(state.team, 'rules', name) + query(opts);
    if (del) return api('DELETE', path, undefined, headers);
    return api('PUT', path, { spec }, headers);
  }

  async function check(del) {
    const ed = state.editing;
    if (!ed) return;
    resetPreview();
    showError('');
    showNotice('');
    const name = $('edit-name').value.trim();
    const spec = $('edit-spec').value;
    if (!name) {
      showProblems([{ message: 'Give the rule a name.' }]);
      return;
    }
    try {
      const { data } = await change(ed, name, spec, del, { dryRun: true });
      showPreview($('diff'), $('loosenings'), data);
      const loosens = (data.loosenings || []).length > 0;
      $('confirm-box').hidden = !loosens;
      $('preview').hidden = false;
      if (!data.changed) {
        $('diff').append(el('p', { class: 'unchanged' }, 'No change: the service already holds exactly this.'));
        return;
      }
      state.preview = { name, spec, del, loosens };
      $('save').disabled = false;
      $('save').textContent = del ? 'Delete ' + name : 'Save';
    } catch (e) {
      if (e instanceof APIError && e.detail.code === 'invalid_rules') {
        showProblems(e.detail.problems || [{ message: e.message }]);
      } else {
        report(e);
      }
    }
  }

  function showProblems(problems) {
    const list = $('problems');
    clear(list);
    for (const p of problems) {
      let where = '';
      if (p.line) where += 'line ' + p.line + (p.column ? ', column ' + p.column : '') + ': ';
      if (p.field) where += p.field + ': ';
      list.append(el('li', { 'data-field': p.field || '', 'data-line': p.line || 0 }, where + p.message));
    }
  }

  // showPreview draws a ChangeResult's diff, one block per rule, each line
  // marked as added, removed or context.
  function showPreview(diffNode, looseNode, res) {
    clear(diffNode);
    clear(looseNode);
    for (const ch of res.changes || []) {
      const block = el('div', { class: 'diff', 'data-rule': ch.rule, 'data-action': ch.action });
      block.append(el('h4', {}, ch.action + ' ' + ch.rule));
      const pre = el('pre', {});
      const text = ch.diff || '';
      for (const line of text.split('\n')) {
        if (line === '') continue;
        let cls = 'ctx';
        if (line.startsWith('+') && !line.startsWith('+++')) cls = 'add';
        else if (line.startsWith('-') && !line.startsWith('---')) cls = 'del';
        pre.append(el('span', { class: cls }, line));
      }
      block.append(pre);
      diffNode.append(block);
    }
    for (const l of res.loosenings || []) {
      looseNode.append(el('li', { 'data-rule': l.rule }, l.rule + (l.key ? ' (override ' + l.key + ')' : '') + ': ' + l.reason));
    }
  }

  async function save() {
    const ed = state.editing;
    const p = state.preview;
    if (!ed || !p) return;
    // What is saved is what was previewed: an edit since needs a new check.
    if ($('edit-spec').value !== p.spec || $('edit-name').value.trim() !== p.name) {
      showError('The rule changed since the preview: check it again.');
      resetPreview();
      return;
    }
    if (p.loosens && !$('confirm').checked) {
      showError('This removes or loosens limits: tick the box to confirm.');
      return;
    }
    try {
      const { data } = await change(ed, p.name, p.spec, p.del, { confirm: p.loosens });
      closeEditor();
      showNotice((p.del ? 'Deleted ' : 'Saved ') + p.name + ': version ' + data.version + '.');
      await Promise.all([loadRules(), loadHistory()]);
    } catch (e) {
      if (e instanceof APIError && e.detail.code === 'stale') {
        showError('Someone changed ' + p.name + ' since you opened it (now ' + (e.detail.current_etag || '?') + '). Open it again to see their change.');
        await loadRules();
        return;
      }
      if (e instanceof APIError && e.detail.code === 'invalid_rules') {
        showProblems(e.detail.problems || []);
        return;
      }
      report(e);
    }
  }

  // --- rollback

  // previewRollback shows what going back would change: one step, or to
  // the team's rules as of toVersion.
  async function previewRollback(toVersion) {
    closeEditor();
    closeRollback();
    showError('');
    showNotice('');
    const etag = $('rules').getAttribute('data-etag') || '';
    const headers = etag ? { 'If-Match': etag } : {};
    const body = toVersion ? { to_version: toVersion } : {};
    $('rollback-title').textContent = toVersion ? 'Going back to version ' + toVersion + ' changes this' : 'Rolling back the latest change changes this';
    try {
      const { data } = await api('POST', teamPath(state.team, 'rollback') + query({ dryRun: true }), body, headers);
      showPreview($('rollback-diff'), $('rollback-loosenings'), data);
      const loosens = (data.loosenings || []).length > 0;
      state.rollback = { etag, loosens, body };
      $('rollback-confirm-box').hidden = !loosens;
      $('rollback-do').disabled = !data.changed;
      if (!data.changed) $('rollback-diff').append(el('p', {}, 'Rolling back changes nothing.'));
      $('rollback-preview').hidden = false;
    } catch (e) {
      if (e instanceof APIError && e.status === 404) {
        showError('Nothing to roll back: the team has no earlier version.');
        return;
      }
      report(e);
    }
  }

  function closeRollback() {
    state.rollback = null;
    $('rollback-preview').hidden = true;
    $('rollback-confirm').checked = false;
    clear($('rollback-diff'));
    clear($('rollback-loosenings'));
  }

  async function doRollback() {
    const rb = state.rollback;
    if (!rb) return;
    if (rb.loosens && !$('rollback-confirm').checked) {
      showError('This rollback removes or loosens limits: tick the box to confirm.');
      return;
    }
    const headers = rb.etag ? { 'If-Match': rb.etag } : {};
    try {
      const { data } = await api('POST', teamPath(state.team, 'rollback') + query({ confirm: rb.loosens }), rb.body, headers);
      closeRollback();
      showNotice('Rolled back: version ' + data.version + '.');
      await Promise.all([loadRules(), loadHistory()]);
    } catch (e) {
      if (e instanceof APIError && e.detail.code === 'stale') {
        closeRollback();
        showError('The rules changed since the preview: look again before rolling back.');
        await Promise.all([loadRules(), loadHistory()]);
        return;
      }
      report(e);
    }
  }

  function report(e) {
    if (e instanceof APIError && e.status === 401) {
      signOut();
      showError('The token is no longer accepted: sign in again.');
      return;
    }
    showError(e && e.message ? e.message : String(e));
  }

  // --- wiring

  document.addEventListener('DOMContentLoaded', () => {
    $('signin-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      const token = $('token').value.trim();
      $('token').value = '';
      if (token) signIn(token).catch(report);
    });
    $('signout').addEventListener('click', signOut);
    $('team-select').addEventListener('change', () => openTeam($('team-select').value).catch(report));
    $('new-rule').addEventListener('click', () => openEditor(null).catch(report));
    $('check').addEventListener('click', () => check(false));
    $('delete-rule').addEventListener('click', () => check(true));
    $('save').addEventListener('click', () => save());
    $('cancel').addEventListener('click', closeEditor);
    $('edit-spec').addEventListener('input', resetPreview);
    $('edit-name').addEventListener('input', resetPreview);
    $('rollback').addEventListener('click', () => previewRollback(0));
    $('rollback-do').addEventListener('click', () => doRollback());
    $('rollback-cancel').addEventListener('click', closeRollback);
    const saved = sessionStorage.getItem(TOKEN_KEY);
    if (saved) signIn(saved).catch(report);
  });
})();
