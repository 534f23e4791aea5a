// The sundial dashboard: a page per hash route (#/, #/jobs, #/jobs/<name>, #/runs,
// #/runs/<id>, #/nodes), each drawn from the admin API and redrawn every few seconds.
// Everything shown goes through text nodes (never HTML strings), so no job name, error
// message or data can inject markup.
'use strict';

(() => {
  const REFRESH_MS = 2000;
  const PAGE = 50;
  const TOKEN_KEY = 'sundial.token';

  // ---- Words ------------------------------------------------------------------------
  const WORDS = {
    en: {
      'nav.overview': 'Overview', 'nav.jobs': 'Jobs', 'nav.runs': 'Runs', 'nav.nodes': 'Nodes',
      logout: 'Sign out', cancel: 'Cancel', confirm: 'Confirm',
      'login.title': 'Sign in', 'login.why': 'This node asks for a token. Give a read token to look, an admin token to change things. It is kept in this browser tab only.',
      'login.token': 'Token', 'login.submit': 'Sign in', 'login.wrong': 'That token was refused.',
      unreachable: 'The node does not answer.', live: 'Live · {0}', paused: 'Updates paused: {0}',
      'overview.title': 'Overview', jobs: 'Jobs', total: 'total', 'runs.hour': 'Runs in the last hour', 'runs.hour.newest': 'Ended runs counted over the newest 100,000.',
      leader: 'Leader', none: 'none', store: 'Store', reachable: 'reachable', unreachable_store: 'unreachable', in_process: 'in this process',
      attention: 'Needs attention', failures: 'Recent failures', 'no.failures': 'No failed or lost runs.',
      late: 'Late fires', 'no.late': 'Nothing is late.', 'late.more': '{0} late in all', 'late.by': 'due {0}, late by {1}',
      'chart.fires': 'Runs started per minute (this node)', 'chart.lateness': 'Start lateness, ms (this node): p50 and p99',
      'chart.empty': 'No runs on this node in the last hour.',
      nodes: 'Nodes', node: 'Node', state: 'State', heartbeat: 'Heartbeat', running: 'Running', 'this.node': 'this node', 'this.node.title': 'This node',
      'nodes.title': 'Nodes and the cluster', 'leads': 'leads', term: 'term {0}', slots: 'Run slots in use on this node', version: 'Version',
      'jobs.title': 'Jobs', search: 'Search', any: 'any', type: 'Type', origin: 'Origin', 'next.fire': 'Next fire', 'last.result': 'Last result',
      name: 'Name', 'shown': '{0}–{1} of {2}', 'shown.some': '{0}–{1}', previous: 'Previous', next: 'Next', 'no.jobs': 'No job matches.',
      'job.missing': 'There is no job {0}.', definition: 'Definition', triggers: 'Triggers', schedule: 'Schedule', fires: 'Fires', 'previous.fire': 'Previous fire',
      'recent.runs': 'Recent runs', 'no.runs': 'No run matches.', description: 'Description',
      'act.trigger': 'Trigger now', 'act.enqueue': 'Enqueue', 'act.pause': 'Pause', 'act.resume': 'Resume', 'act.restore': 'Restore code definition', 'act.delete': 'Delete', 'act.cancel': 'Cancel run',
      'ask.trigger': 'Run {0} now and wait for its result?', 'ask.enqueue': 'Queue a run of {0}, due now?', 'ask.pause': 'Pause {0}?', 'ask.resume': 'Resume {0}?',
      'ask.restore': 'Put back the definition of {0} from the node\'s configuration?', 'ask.delete': 'Delete {0} and its triggers? Its history stays.', 'ask.cancel': 'Cancel run {0}?',
      'done.trigger': 'Run of {0} ended: {1}', 'done.enqueue': 'Queued {0} as trigger {1}', 'done': 'Done: {0}',
      'runs.title': 'Runs', job: 'Job', trigger: 'Trigger', from: 'Scheduled from', to: 'to', 'with.error': 'With an error', scheduled: 'Scheduled', started: 'Started', ended: 'Ended', duration: 'Took', error: 'Error', apply: 'Apply', clear: 'Clear',
      'run.title': 'Run {0}', 'run.missing': 'There is no run {0} (history may have been purged).', attempt: 'Attempt', 'retry.of': 'Retry of', cause: 'Cause', data: 'Data',
      'made.retry': 'retry, attempt {0}', 'made.recovery': 'recovery, attempt {0}', 'made.manual': 'by hand',
      'late.start': 'late by {0}', 'took': 'took {0}', 'still.running': 'still running', message: 'Message', code: 'Code',
      yes: 'yes', no: 'no',
      'st.scheduled': 'scheduled', 'st.running': 'running', 'st.paused': 'paused', 'st.error': 'error', 'st.idle': 'idle',
      'st.succeeded': 'succeeded', 'st.failed': 'failed', 'st.canceled': 'canceled', 'st.lost': 'lost',
      'st.waiting': 'waiting', 'st.acquired': 'acquired', 'st.blocked': 'blocked', 'st.complete': 'complete',
      'st.alive': 'alive', 'st.draining': 'draining', 'st.stopped': 'stopped', 'st.serving': 'serving', 'st.starting': 'starting',
      'st.code': 'code', 'st.overridden': 'overridden', 'st.runtime': 'runtime',
    },
    zh: {
      'nav.overview': '概览', 'nav.jobs': '作业', 'nav.runs': '运行', 'nav.nodes': '节点',
      logout: '退出', cancel: '取消', confirm: '确认',
      'login.title': '登录', 'login.why': '此节点需要令牌。只读令牌可查看，管理令牌可修改。令牌只保存在此浏览器标签页中。',
      'login.token': '令牌', 'login.submit': '登录', 'login.wrong': '令牌被拒绝。',
      unreachable: '节点没有响应。', live: '实时 · {0}', paused: '已暂停更新：{0}',
      'overview.title': '概览', jobs: '作业', total: '总数', 'runs.hour': '最近一小时的运行', 'runs.hour.newest': '已结束的运行按最新的 100,000 次计数。',
      leader: '主节点', none: '无', store: '存储', reachable: '可达', unreachable_store: '不可达', in_process: '进程内',
      attention: '需要关注', failures: '最近的失败', 'no.failures': '没有失败或丢失的运行。',
      late: '延迟的触发', 'no.late': '没有延迟。', 'late.more': '共 {0} 个延迟', 'late.by': '应于 {0}，已延迟 {1}',
      'chart.fires': '每分钟启动的运行（本节点）', 'chart.lateness': '启动延迟（毫秒，本节点）：p50 与 p99',
      'chart.empty': '本节点最近一小时没有运行。',
      nodes: '节点', node: '节点', state: '状态', heartbeat: '心跳', running: '运行中', 'this.node': '本节点', 'this.node.title': '本节点',
      'nodes.title': '节点与集群', 'leads': '主节点', term: '任期 {0}', slots: '本节点已用运行槽', version: '版本',
      'jobs.title': '作业', search: '搜索', any: '全部', type: '类型', origin: '来源', 'next.fire': '下次触发', 'last.result': '上次结果',
      name: '名称', 'shown': '第 {0}–{1} 个，共 {2} 个', 'shown.some': '第 {0}–{1} 个', previous: '上一页', next: '下一页', 'no.jobs': '没有匹配的作业。',
      'job.missing': '作业 {0} 不存在。', definition: '定义', triggers: '触发器', schedule: '调度', fires: '触发次数', 'previous.fire': '上次触发',
      'recent.runs': '最近的运行', 'no.runs': '没有匹配的运行。', description: '说明',
      'act.trigger': '立即运行', 'act.enqueue': '加入队列', 'act.pause': '暂停', 'act.resume': '恢复', 'act.restore': '恢复代码定义', 'act.delete': '删除', 'act.cancel': '取消运行',
      'ask.trigger': '立即运行 {0} 并等待结果？', 'ask.enqueue': '为 {0} 加入一个立即到期的运行？', 'ask.pause': '暂停 {0}？', 'ask.resume': '恢复 {0}？',
      'ask.restore': '用节点配置中的定义恢复 {0}？', 'ask.delete': '删除 {0} 及其触发器？历史记录保留。', 'ask.cancel': '取消运行 {0}？',
      'done.trigger': '{0} 的运行已结束：{1}', 'done.enqueue': '{0} 已加入队列，触发器 {1}', 'done': '完成：{0}',
      'runs.title': '运行', job: '作业', trigger: '触发器', from: '计划时间从', to: '到', 'with.error': '有错误', scheduled: '计划', started: '开始', ended: '结束', duration: '耗时', error: '错误', apply: '应用', clear: '清除',
      'run.title': '运行 {0}', 'run.missing': '运行 {0} 不存在（历史可能已清理）。', attempt: '尝试', 'retry.of': '重试自', cause: '原因', data: '数据',
      'made.retry': '重试，第 {0} 次', 'made.recovery': '恢复，第 {0} 次', 'made.manual': '手动',
      'late.start': '延迟 {0}', 'took': '耗时 {0}', 'still.running': '仍在运行', message: '消息', code: '代码',
      yes: '是', no: '否',
      'st.scheduled': '已调度', 'st.running': '运行中', 'st.paused': '已暂停', 'st.error': '错误', 'st.idle': '空闲',
      'st.succeeded': '成功', 'st.failed': '失败', 'st.canceled': '已取消', 'st.lost': '丢失',
      'st.waiting': '等待', 'st.acquired': '已获取', 'st.blocked': '阻塞', 'st.complete': '完成',
      'st.alive': '存活', 'st.draining': '排空中', 'st.stopped': '已停止', 'st.serving': '服务中', 'st.starting': '启动中',
      'st.code': '代码', 'st.overridden': '已覆盖', 'st.runtime': '运行时',
    },
  };
  const lang = /^zh\b/i.test(navigator.language || '') ? 'zh' : 'en';
  const t = (key, ...args) => (WORDS[lang][key] ?? WORDS.en[key] ?? key).replace(/\{(\d)\}/g, (_, i) => String(args[i]));
  const stateWord = (s) => t('st.' + String(s).toLowerCase());

  // ---- DOM --------------------------------------------------------------------------
  function build(make, tag, attrs, kids) {
    const el = make(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key.startsWith('on')) el.addEventListener(key.slice(2), value);
      else el.setAttribute(key === 'className' ? 'class' : key, value === true ? '' : String(value));
    }
    for (const kid of kids.flat(Infinity)) {
      if (kid === null || kid === undefined || kid === false) continue;
      el.append(kid instanceof Node ? kid : String(kid));
    }
    return el;
  }
  const h = (tag, attrs, ...kids) => build((n) => document.createElement(n), tag, attrs, kids);
  const svg = (tag, attrs, ...kids) => build((n) => document.createElementNS('http://www.w3.org/2000/svg', n), tag, attrs, kids);
  const $ = (sel) => document.querySelector(sel);
  const view = $('#view');

  // ---- Times ------------------------------------------------------------------------
  const dateTime = new Intl.DateTimeFormat(lang === 'zh' ? 'zh-CN' : undefined, { dateStyle: 'medium', timeStyle: 'medium' });
  const clock = new Intl.DateTimeFormat(lang === 'zh' ? 'zh-CN' : undefined, { timeStyle: 'short' });
  const timeOfDay = new Intl.DateTimeFormat(lang === 'zh' ? 'zh-CN' : undefined, { timeStyle: 'medium' });
  const sameDay = (a, b) => a.getFullYear() === b.getFullYear() && a.getMonth() === b.getMonth() && a.getDate() === b.getDate();
  const utc = (d) => 'UTC ' + d.toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z');
  function time(iso) {
    if (!iso) return '–';
    const d = new Date(iso);
    // Today's times without the date: tables stay narrow enough to show every column.
    return h('time', { datetime: iso, title: utc(d) }, (sameDay(d, new Date()) ? timeOfDay : dateTime).format(d));
  }
  function span(ms) {
    if (ms === null || ms === undefined || Number.isNaN(ms)) return '–';
    const a = Math.abs(ms);
    if (a < 1) return ms.toFixed(2) + ' ms';
    if (a < 1000) return Math.round(ms) + ' ms';
    if (a < 60e3) return (ms / 1000).toFixed(1) + ' s';
    if (a < 3600e3) return Math.round(ms / 60e3) + ' min';
    if (a < 86400e3) return (ms / 3600e3).toFixed(1) + ' h';
    return (ms / 86400e3).toFixed(1) + ' d';
  }
  const number = new Intl.NumberFormat(lang === 'zh' ? 'zh-CN' : undefined);
  const count = (n) => number.format(n ?? 0);
  const between = (a, b) => (a && b ? new Date(b) - new Date(a) : null);
  // From `a` to `b` in words; the browser keeps milliseconds, so 0 is under one.
  const elapsed = (a, b) => { const ms = between(a, b); return ms === 0 ? '< 1 ms' : span(ms); };

  // ---- API --------------------------------------------------------------------------
  class ApiError extends Error {
    constructor(code, message, status) { super(message || code); this.code = code; this.status = status; }
  }
  async function api(path, method = 'GET', body) {
    const headers = { Accept: 'application/json' };
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (token) headers.Authorization = 'Bearer ' + token;
    if (body !== undefined) headers['Content-Type'] = 'application/json';
    let response;
    try {
      response = await fetch(path, { method, headers, cache: 'no-store', body: body === undefined ? undefined : JSON.stringify(body) });
    } catch (e) {
      throw new ApiError('NETWORK', t('unreachable'), 0);
    }
    const text = await response.text();
    let data = null;
    try { data = text ? JSON.parse(text) : null; } catch (e) { data = null; }
    if (!response.ok) {
      const error = new ApiError(data?.code || 'HTTP_' + response.status, data?.message || text, response.status);
      if (response.status === 401) signIn(error);
      throw error;
    }
    return { data, total: Number(response.headers.get('x-total-count') ?? NaN) };
  }
  const get = async (path) => (await api(path)).data;
  const enc = encodeURIComponent;

  // ---- Feedback -----------------------------------------------------------------------
  let toastTimer = null;
  function toast(text, ok) {
    const box = $('#toast');
    box.textContent = text;
    box.className = ok ? 'ok shown' : 'bad shown';
    clearTimeout(toastTimer);
    toastTimer = setTimeout(() => { box.className = ''; }, 8000);
  }
  const failure = (e) => (e.code && e.code !== e.message ? e.code + ': ' : '') + (e.message || e);

  function ask(question) {
    const dialog = $('#confirm');
    $('#confirm-text').textContent = question;
    return new Promise((resolve) => {
      dialog.addEventListener('close', () => resolve(dialog.returnValue === 'ok'), { once: true });
      dialog.returnValue = '';
      dialog.showModal();
    });
  }

  // Confirms, does, reports, redraws.
  async function act(question, doIt, done) {
    if (!(await ask(question))) return;
    try {
      const result = await doIt();
      toast(done(result), true);
    } catch (e) {
      toast(failure(e), false);
    }
    refreshNow();
  }
  const button = (label, onclick, attrs = {}) => h('button', { type: 'button', onclick, ...attrs }, label);

  // ---- Shared pieces ------------------------------------------------------------------
  const badge = (state) => h('span', { className: 'badge s-' + String(state).toLowerCase() }, stateWord(state));
  const jobLink = (name) => h('a', { href: '#/jobs/' + enc(name) }, name);
  // A run id's random tail: its head is the time it was made, the same for a minute's runs.
  const shortId = (id) => id.slice(-8);
  const runLink = (id) => h('a', { href: '#/runs/' + enc(id), title: id, className: 'mono' }, shortId(id));
  // Engine-made triggers (`retry-<run id>`, `recovery-…`, `manual-…`) by what they are.
  const madeKind = (name) => ['retry', 'recovery', 'manual'].find((kind) => name?.startsWith(kind + '-'));
  function triggerLabel(r) {
    if (!r.trigger) return '–';
    const made = madeKind(r.trigger);
    return made ? h('span', { title: r.trigger }, t('made.' + made, r.attempt)) : r.trigger;
  }
  function table(headers, rows, empty) {
    if (!rows.length) return h('p', { className: 'empty' }, empty);
    return h('div', { className: 'scroll' },
      h('table', {},
        h('thead', {}, h('tr', {}, headers.map((x) => h('th', { scope: 'col' }, x)))),
        h('tbody', {}, rows.map((cells) => h('tr', {}, cells.map((c) => h('td', {}, c)))))));
  }
  // Paging: `total` when known (jobs), else whether there are `more` (runs: history may
  // hold millions, so it is never counted whole).
  function pager(skip, shown, more, total, go) {
    const label = total !== null ? (total ? t('shown', skip + 1, skip + shown, total) : '')
      : (shown ? t('shown.some', skip + 1, skip + shown) : '');
    return h('div', { className: 'pager' },
      button(t('previous'), () => go(Math.max(0, skip - PAGE)), { disabled: skip === 0 }),
      h('span', {}, label),
      button(t('next'), () => go(skip + PAGE), { disabled: !more }));
  }
  function select(label, name, value, options, onchange) {
    return h('label', {}, label,
      h('select', { name, onchange },
        h('option', { value: '' }, t('any')),
        options.map(([v, text]) => h('option', { value: v, selected: v === value }, text))));
  }
  const runRow = (r) => [runLink(r.id), jobLink(r.job), triggerLabel(r), badge(r.state), time(r.scheduled_at),
    time(r.started_at), r.finished_at ? elapsed(r.started_at, r.finished_at) : t('still.running'), r.node, r.error_code || ''];
  const runHeaders = () => ['#', t('job'), t('trigger'), t('state'), t('scheduled'), t('started'), t('duration'), t('node'), t('error')];

  function nodesTable(cluster) {
    return table([t('node'), t('state'), t('leader'), t('heartbeat'), t('running')], cluster.nodes.map((n) => [
      h('span', {}, n.node, n.this_node ? h('small', {}, ' (' + t('this.node') + ')') : ''),
      badge(n.state), n.leader ? t('leads') : '',
      n.heartbeat_at ? h('span', { title: utc(new Date(n.heartbeat_at)) }, span(n.heartbeat_age_ms)) : '–',
      String(n.running)]), t('none'));
  }

  // ---- Charts -------------------------------------------------------------------------
  // A chart of per-minute values over the last hour: bars or lines, with its scale.
  function chart(title, minutes, series, kind) {
    const W = 600, H = 150, L = 44, B = 20;
    const now = Date.now(), start = now - 3600e3;
    const x = (iso) => L + ((new Date(iso) - start) / 3600e3) * (W - L - 4);
    const values = series.flatMap((s) => minutes.map((m) => m[s.key]).filter((v) => v !== null && v !== undefined));
    const max = Math.max(1, ...values);
    const y = (v) => H - B - (v / max) * (H - B - 8);
    const summary = series.map((s) => s.label + ' max ' + Math.round(Math.max(0, ...minutes.map((m) => m[s.key] || 0)) * 100) / 100).join(', ');
    const marks = series.map((s) => {
      if (kind === 'bars') {
        return minutes.map((m) => svg('rect', { x: x(m.minute), y: y(m[s.key]), width: Math.max(2, (W - L) / 62), height: H - B - y(m[s.key]), className: s.cls },
          svg('title', {}, clock.format(new Date(m.minute)) + ': ' + m[s.key])));
      }
      const points = minutes.filter((m) => m[s.key] !== null && m[s.key] !== undefined).map((m) => x(m.minute).toFixed(1) + ',' + y(m[s.key]).toFixed(1));
      return [svg('polyline', { points: points.join(' '), className: s.cls + ' line' }),
        minutes.filter((m) => m[s.key] !== null && m[s.key] !== undefined).map((m) =>
          svg('circle', { cx: x(m.minute), cy: y(m[s.key]), r: 2.5, className: s.cls }, svg('title', {}, clock.format(new Date(m.minute)) + ' ' + s.label + ': ' + m[s.key])))];
    });
    return h('figure', { className: 'chart' },
      h('figcaption', {}, title, ' ', series.length > 1 ? series.map((s) => h('span', { className: 'key ' + s.cls }, s.label)) : ''),
      minutes.length ? svg('svg', { viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': title + ': ' + summary },
        svg('line', { x1: L, y1: H - B, x2: W, y2: H - B, className: 'axis' }),
        svg('text', { x: L - 6, y: 14, className: 'tick', 'text-anchor': 'end' }, String(Math.round(max * 100) / 100)),
        svg('text', { x: L - 6, y: H - B, className: 'tick', 'text-anchor': 'end' }, '0'),
        svg('text', { x: L, y: H - 4, className: 'tick' }, clock.format(new Date(start))),
        svg('text', { x: W - 4, y: H - 4, className: 'tick', 'text-anchor': 'end' }, clock.format(new Date(now))),
        marks) : h('p', { className: 'empty' }, t('chart.empty')));
  }

  // ---- Pages --------------------------------------------------------------------------
  function overviewPage() {
    const body = h('div');
    view.append(h('h1', {}, t('overview.title')), body);
    return async () => {
      const o = await get('/api/overview');
      const hourAgo = new Date(new Date(o.now) - 3600e3).toISOString();
      const runStates = ['running', 'succeeded', 'failed', 'canceled', 'lost'];
      const jobStates = ['scheduled', 'running', 'paused', 'error', 'idle'];
      const storeState = o.store.reachable === null ? t('in_process') : o.store.reachable ? t('reachable') : t('unreachable_store');
      body.replaceChildren(
        h('section', { className: 'cards' },
          h('article', { className: 'card' }, h('h2', {}, t('jobs')), h('p', { className: 'big' }, count(o.jobs.total), h('small', {}, ' ' + t('total'))),
            h('ul', { className: 'counts' }, jobStates.map((s) => h('li', {}, h('a', { href: '#/jobs?state=' + s }, badge(s), ' ', count(o.jobs.by_state[s])))))),
          h('article', { className: 'card' }, h('h2', {}, t('runs.hour')),
            h('ul', { className: 'counts' }, runStates.map((s) => h('li', {}, h('a', { href: '#/runs?state=' + s + '&from=' + enc(hourAgo) }, badge(s), ' ', count(o.runs_last_hour[s]) + (o.runs_last_hour_complete === false && s !== 'running' ? '+' : ''))))),
            o.runs_last_hour_complete === false ? h('p', { className: 'muted' }, t('runs.hour.newest')) : ''),
          h('article', { className: 'card' }, h('h2', {}, t('leader')), h('p', { className: 'big' }, o.cluster.leader || t('none')),
            o.cluster.leader_term ? h('p', {}, t('term', o.cluster.leader_term)) : ''),
          h('article', { className: 'card' + (o.store.reachable === false ? ' alarm' : '') }, h('h2', {}, t('store')), h('p', { className: 'big' }, o.store.kind),
            h('p', {}, storeState), o.store.error ? h('p', { className: 'error-text' }, o.store.error) : '')),
        h('h2', {}, t('attention')),
        h('section', { className: 'two' },
          h('div', {}, h('h3', {}, t('failures')),
            o.recent_failures.length ? h('ul', { className: 'list' }, o.recent_failures.map((r) => h('li', {},
              runLink(r.id), ' ', jobLink(r.job), ' ', badge(r.state), ' ', time(r.scheduled_at),
              h('div', { className: 'error-text' }, [r.error_code, r.error_message].filter(Boolean).join(': '))))) : h('p', { className: 'empty' }, t('no.failures'))),
          h('div', {}, h('h3', {}, t('late')),
            o.jobs.late.length ? [h('ul', { className: 'list' }, o.jobs.late.map((l) => h('li', {}, jobLink(l.job), ' / ', l.trigger, ' — ',
              t('late.by', dateTime.format(new Date(l.due)), span(new Date(o.now) - new Date(l.due)))))),
            o.jobs.late_count > o.jobs.late.length ? h('p', {}, t('late.more', o.jobs.late_count)) : ''] : h('p', { className: 'empty' }, t('no.late')))),
        h('section', { className: 'two' },
          chart(t('chart.fires'), o.timeline, [{ key: 'started', label: t('started'), cls: 'c1' }], 'bars'),
          chart(t('chart.lateness'), o.timeline, [{ key: 'lateness_p50_ms', label: 'p50', cls: 'c1' }, { key: 'lateness_p99_ms', label: 'p99', cls: 'c2' }], 'lines')),
        h('h2', {}, t('nodes')), nodesTable(o.cluster));
    };
  }

  function jobsPage(params) {
    const filters = { q: params.get('q') || '', state: params.get('state') || '', type: params.get('type') || '', origin: params.get('origin') || '' };
    let skip = Number(params.get('skip')) || 0;
    const results = h('div');
    const remember = () => {
      const qs = new URLSearchParams(Object.entries({ ...filters, skip: skip || '' }).filter(([, v]) => v));
      history.replaceState(null, '', '#/jobs' + (qs.toString() ? '?' + qs : ''));
    };
    const change = (key) => (e) => { filters[key] = e.target.value; skip = 0; remember(); refreshNow(); };
    let typing = null;
    const form = h('form', { className: 'filters', role: 'search', onsubmit: (e) => { e.preventDefault(); refreshNow(); } },
      h('label', {}, t('search'), h('input', { type: 'search', name: 'q', value: filters.q, autocomplete: 'off',
        oninput: (e) => { clearTimeout(typing); typing = setTimeout(() => change('q')(e), 250); } })),
      select(t('state'), 'state', filters.state, ['scheduled', 'running', 'paused', 'error', 'idle'].map((s) => [s, stateWord(s)]), change('state')),
      h('span', { id: 'type-filter' }),
      select(t('origin'), 'origin', filters.origin, ['code', 'overridden', 'runtime'].map((s) => [s, stateWord(s)]), change('origin')));
    view.append(h('h1', {}, t('jobs.title')), form, results);
    get('/api/job-types').then((types) => {
      $('#type-filter').replaceWith(select(t('type'), 'type', filters.type, types.map((x) => [x, x]), change('type')));
    }).catch(() => {});
    return async () => {
      const qs = new URLSearchParams(Object.entries(filters).filter(([, v]) => v));
      qs.set('limit', PAGE);
      qs.set('skip', skip);
      const { data: jobs, total } = await api('/api/jobs?' + qs);
      const rows = jobs.map((j) => {
        const next = j.triggers.map((x) => x.next_fire).filter(Boolean).sort()[0];
        const last = j.last_finished;
        return [jobLink(j.spec.name), j.spec.type, stateWord(j.origin), badge(j.state), time(next),
          last ? h('span', {}, badge(last.state), ' ', time(last.finished_at || last.started_at)) : '–', String(j.running)];
      });
      results.replaceChildren(
        table([t('name'), t('type'), t('origin'), t('state'), t('next.fire'), t('last.result'), t('running')], rows, t('no.jobs')),
        pager(skip, jobs.length, skip + jobs.length < total, total, (s) => { skip = s; remember(); refreshNow(); }));
    };
  }

  function jobPage(name) {
    const head = h('div'), body = h('div');
    view.append(head, body);
    const path = '/api/jobs/' + enc(name);
    return async () => {
      let job;
      try {
        job = await get(path);
      } catch (e) {
        if (e.status === 404) { head.replaceChildren(h('h1', {}, name)); body.replaceChildren(h('p', {}, t('job.missing', name)), h('a', { href: '#/jobs' }, t('jobs.title'))); return; }
        throw e;
      }
      const runs = await get('/api/runs?job=' + enc(name) + '&limit=20');
      const spec = job.spec;
      const actions = h('div', { className: 'actions' },
        button(t('act.trigger'), () => act(t('ask.trigger', name), () => api(path + '/trigger', 'POST'),
          (r) => t('done.trigger', name, stateWord(r.data.state) + (r.data.error_message ? ' — ' + r.data.error_message : '')))),
        button(t('act.enqueue'), () => act(t('ask.enqueue', name), () => api(path + '/enqueue', 'POST'), (r) => t('done.enqueue', name, r.data.trigger))),
        job.paused
          ? button(t('act.resume'), () => act(t('ask.resume', name), () => api(path + '/resume', 'POST'), () => t('done', t('act.resume') + ' ' + name)))
          : button(t('act.pause'), () => act(t('ask.pause', name), () => api(path + '/pause', 'POST'), () => t('done', t('act.pause') + ' ' + name))),
        job.origin === 'Overridden'
          ? button(t('act.restore'), () => act(t('ask.restore', name), () => api(path + '/restore', 'POST'), () => t('done', t('act.restore') + ' ' + name))) : '',
        button(t('act.delete'), () => act(t('ask.delete', name), () => api(path, 'DELETE'), () => { location.hash = '#/jobs'; return t('done', t('act.delete') + ' ' + name); }), { className: 'danger' }));
      head.replaceChildren(h('h1', {}, name, ' ', badge(job.state)), actions);
      const schedules = Object.fromEntries(spec.triggers.map((x) => [x.name, x.schedule]));
      const triggerRows = job.triggers.map((x) => {
        const words = job.described[x.name]?.[lang];
        const raw = schedules[x.name];
        const key = path + '/triggers/' + enc(x.name);
        const toggle = x.paused
          ? button(t('act.resume'), () => act(t('ask.resume', name + '/' + x.name), () => api(key + '/resume', 'POST'), () => t('done', t('act.resume') + ' ' + x.name)))
          : button(t('act.pause'), () => act(t('ask.pause', name + '/' + x.name), () => api(key + '/pause', 'POST'), () => t('done', t('act.pause') + ' ' + x.name)));
        return [x.name, words ? h('span', { title: raw }, words) : h('code', {}, raw || '–'),
          h('span', {}, badge(x.paused ? 'paused' : x.state), x.error ? h('div', { className: 'error-text' }, x.error) : ''),
          time(x.next_fire), time(x.previous_fire), String(x.fire_count), toggle];
      });
      body.replaceChildren(
        spec.description ? h('p', {}, spec.description) : '',
        h('dl', { className: 'facts' },
          h('dt', {}, t('type')), h('dd', {}, spec.type),
          h('dt', {}, t('origin')), h('dd', {}, stateWord(job.origin)),
          h('dt', {}, t('running')), h('dd', {}, String(job.running))),
        h('h2', {}, t('triggers')),
        table([t('trigger'), t('schedule'), t('state'), t('next.fire'), t('previous.fire'), t('fires'), ''], triggerRows, t('none')),
        h('h2', {}, t('recent.runs')),
        table(runHeaders(), runs.map(runRow), t('no.runs')),
        h('details', {}, h('summary', {}, t('definition')), h('pre', {}, JSON.stringify(spec, null, 2))));
    };
  }

  // A datetime-local value (the browser's zone) from an ISO instant, and back.
  const localInput = (iso) => {
    if (!iso) return '';
    const d = new Date(iso);
    return new Date(d - d.getTimezoneOffset() * 60e3).toISOString().slice(0, 16);
  };
  const fromLocal = (value) => (value ? new Date(value).toISOString() : '');

  function runsPage(params) {
    const filters = Object.fromEntries(['job', 'state', 'node', 'from', 'to', 'has_error'].map((k) => [k, params.get(k) || '']));
    let skip = Number(params.get('skip')) || 0;
    const results = h('div');
    const remember = () => {
      const qs = new URLSearchParams(Object.entries({ ...filters, skip: skip || '' }).filter(([, v]) => v));
      history.replaceState(null, '', '#/runs' + (qs.toString() ? '?' + qs : ''));
    };
    const form = h('form', { className: 'filters', role: 'search', onsubmit: (e) => {
      e.preventDefault();
      const data = new FormData(e.target);
      for (const key of ['job', 'state', 'node', 'has_error']) filters[key] = (data.get(key) || '').trim();
      filters.from = fromLocal(data.get('from'));
      filters.to = fromLocal(data.get('to'));
      skip = 0; remember(); refreshNow();
    } },
      h('label', {}, t('job'), h('input', { name: 'job', value: filters.job, autocomplete: 'off' })),
      select(t('state'), 'state', filters.state, ['running', 'succeeded', 'failed', 'canceled', 'lost'].map((s) => [s, stateWord(s)])),
      h('label', {}, t('node'), h('input', { name: 'node', value: filters.node, autocomplete: 'off' })),
      h('label', {}, t('from'), h('input', { type: 'datetime-local', name: 'from', value: localInput(filters.from) })),
      h('label', {}, t('to'), h('input', { type: 'datetime-local', name: 'to', value: localInput(filters.to) })),
      select(t('with.error'), 'has_error', filters.has_error, [['true', t('yes')], ['false', t('no')]]),
      h('button', { type: 'submit', className: 'primary' }, t('apply')),
      h('a', { href: '#/runs', className: 'button', onclick: () => setTimeout(route) }, t('clear')));
    view.append(h('h1', {}, t('runs.title')), form, results);
    return async () => {
      const qs = new URLSearchParams(Object.entries(filters).filter(([, v]) => v));
      // One more than a page: whether there is a next one.
      qs.set('limit', PAGE + 1);
      qs.set('skip', skip);
      const runs = await get('/api/runs?' + qs);
      const page = runs.slice(0, PAGE);
      results.replaceChildren(table(runHeaders(), page.map(runRow), t('no.runs')),
        pager(skip, page.length, runs.length > PAGE, null, (s) => { skip = s; remember(); refreshNow(); }));
    };
  }

  function runPage(id) {
    const head = h('div'), body = h('div');
    view.append(head, body);
    return async () => {
      let r;
      try {
        r = await get('/api/runs/' + enc(id));
      } catch (e) {
        if (e.status === 404 || e.status === 400) { head.replaceChildren(h('h1', {}, t('run.title', shortId(id)))); body.replaceChildren(h('p', {}, t('run.missing', id))); return; }
        throw e;
      }
      head.replaceChildren(h('h1', {}, t('run.title', shortId(id)), ' ', badge(r.state)),
        r.state === 'Running' ? h('div', { className: 'actions' }, button(t('act.cancel'), () => act(t('ask.cancel', id), () => api('/api/runs/' + enc(id) + '/cancel', 'POST'), () => t('done', t('act.cancel'))), { className: 'danger' })) : '');
      body.replaceChildren(
        h('ol', { className: 'timeline' },
          h('li', {}, h('strong', {}, t('scheduled')), ' ', time(r.scheduled_at)),
          h('li', {}, h('strong', {}, t('started')), ' ', time(r.started_at), ' ', h('small', {}, t('late.start', elapsed(r.scheduled_at, r.started_at)))),
          h('li', { className: r.finished_at ? '' : 'pending' }, h('strong', {}, t('ended')), ' ',
            r.finished_at ? [time(r.finished_at), ' ', h('small', {}, t('took', elapsed(r.started_at, r.finished_at)))] : t('still.running'))),
        h('dl', { className: 'facts' },
          h('dt', {}, 'ID'), h('dd', { className: 'mono' }, r.id),
          h('dt', {}, t('job')), h('dd', {}, jobLink(r.job)),
          h('dt', {}, t('trigger')), h('dd', {}, triggerLabel(r), madeKind(r.trigger) ? h('small', { className: 'mono' }, ' ' + r.trigger) : ''),
          h('dt', {}, t('cause')), h('dd', {}, String(r.cause)),
          h('dt', {}, t('attempt')), h('dd', {}, String(r.attempt)),
          h('dt', {}, t('retry.of')), h('dd', {}, r.retry_of ? runLink(r.retry_of) : '–'),
          h('dt', {}, t('node')), h('dd', {}, r.node),
          h('dt', {}, t('code')), h('dd', {}, r.error_code || '–'),
          h('dt', {}, t('message')), h('dd', { className: r.error_message ? 'error-text' : '' }, r.error_message || '–')),
        Object.keys(r.data || {}).length ? h('details', {}, h('summary', {}, t('data')), h('pre', {}, JSON.stringify(r.data, null, 2))) : '');
    };
  }

  function nodesPage() {
    const body = h('div');
    view.append(h('h1', {}, t('nodes.title')), body);
    return async () => {
      const [node, cluster] = await Promise.all([get('/api/node'), get('/api/cluster')]);
      body.replaceChildren(
        h('dl', { className: 'facts' },
          h('dt', {}, t('leader')), h('dd', {}, cluster.leader || t('none'), cluster.leader_term ? ' (' + t('term', cluster.leader_term) + ')' : ''),
          h('dt', {}, t('this.node.title')), h('dd', {}, node.node_id, ' ', badge(node.state)),
          h('dt', {}, t('slots')), h('dd', {}, h('meter', { min: 0, max: node.run_slots, value: node.running }), ' ', node.running + ' / ' + node.run_slots),
          h('dt', {}, t('store')), h('dd', {}, node.store),
          h('dt', {}, t('version')), h('dd', {}, node.version)),
        nodesTable(cluster));
    };
  }

  // ---- Sign in ----------------------------------------------------------------------
  let signingIn = false;
  function signIn(error) {
    if (signingIn) return;
    signingIn = true;
    stop();
    const wrong = sessionStorage.getItem(TOKEN_KEY) !== null;
    sessionStorage.removeItem(TOKEN_KEY);
    $('#logout').hidden = true;
    const input = h('input', { type: 'password', name: 'token', id: 'token', required: true, autocomplete: 'current-password' });
    view.replaceChildren(h('h1', {}, t('login.title')),
      h('form', { className: 'login', onsubmit: (e) => {
        e.preventDefault();
        sessionStorage.setItem(TOKEN_KEY, input.value.trim());
        signingIn = false;
        $('#logout').hidden = false;
        route();
      } },
        h('p', {}, t('login.why')),
        wrong ? h('p', { className: 'error-text', role: 'alert' }, t('login.wrong'), error?.code ? ' (' + error.code + ')' : '') : '',
        h('label', { for: 'token' }, t('login.token')), input,
        h('button', { type: 'submit', className: 'primary' }, t('login.submit'))));
    input.focus();
  }

  // ---- Router and live updates --------------------------------------------------------
  const ROUTES = [
    [/^\/$/, 'overview', () => overviewPage()],
    [/^\/jobs$/, 'jobs', (m, p) => jobsPage(p)],
    [/^\/jobs\/([^/]+)$/, 'jobs', (m) => jobPage(decodeURIComponent(m[1]))],
    [/^\/runs$/, 'runs', (m, p) => runsPage(p)],
    [/^\/runs\/([^/]+)$/, 'runs', (m) => runPage(decodeURIComponent(m[1]))],
    [/^\/nodes$/, 'nodes', () => nodesPage()],
  ];
  let refresh = null, busy = false, timer = null, generation = 0, drawn = -1;

  function stop() { clearInterval(timer); timer = null; refresh = null; }

  async function refreshNow() {
    if (!refresh || busy || signingIn) return;
    const mine = generation;
    busy = true;
    try {
      await refresh();
      if (mine === generation && drawn !== mine) {
        drawn = mine;
        // The page's first draw of its data, as the dashboard bench times it.
        performance.mark('sundial:drawn', { detail: location.hash });
      }
      if (mine === generation) $('#live').textContent = t('live', clock.format(new Date()));
      $('#live').classList.remove('stale');
    } catch (e) {
      if (e.status !== 401 && mine === generation) {
        $('#live').textContent = t('paused', failure(e));
        $('#live').classList.add('stale');
      }
    } finally {
      busy = false;
    }
  }

  function route() {
    if (signingIn) return;
    stop();
    generation += 1;
    const raw = location.hash.slice(1) || '/';
    const [path, query] = raw.split('?');
    const found = ROUTES.map(([re, nav, make]) => [path.match(re), nav, make]).find(([m]) => m);
    view.replaceChildren();
    document.querySelectorAll('nav a').forEach((a) => a.removeAttribute('aria-current'));
    if (!found) { location.hash = '#/'; return; }
    const [match, nav, make] = found;
    document.querySelector(`nav a[data-nav="${nav}"]`)?.setAttribute('aria-current', 'page');
    document.title = 'sundial · ' + t('nav.' + nav);
    refresh = make(match, new URLSearchParams(query || ''));
    refreshNow();
    timer = setInterval(() => { if (!document.hidden && !$('#confirm').open) refreshNow(); }, REFRESH_MS);
  }

  document.documentElement.lang = lang === 'zh' ? 'zh-CN' : 'en';
  document.querySelectorAll('[data-label]').forEach((el) => { el.textContent = t(el.dataset.label); });
  $('#logout').hidden = sessionStorage.getItem(TOKEN_KEY) === null;
  $('#logout').addEventListener('click', () => { sessionStorage.removeItem(TOKEN_KEY); location.hash = '#/'; location.reload(); });
  window.addEventListener('hashchange', () => { view.focus({ preventScroll: true }); route(); });
  route();
})();
