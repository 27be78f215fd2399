// The throttler console: plain JavaScript, no framework, no build step.
// Every piece of data comes from the admin API (/api/v1) and needs the
// token: either the browser sends Authorization itself (the page then
// says data-authed="1"), or the token typed in the form is kept in
// sessionStorage (this tab only) and sent with every request. The token
// never goes into the address bar.
"use strict";

(function () {
  const TOKEN_KEY = "throttler-admin-token";
  const REFRESH_MS = 1000;
  const PAGE = 50;
  const CHART_POINTS = 300; // 5 minutes at one a second

  const timings = { tenants: { firstRenderMs: null, refreshMs: [] } };
  window.throttlerConsole = { timings };
  const root = document.documentElement;
  const headerAuth = root.dataset.authed === "1";
  const $ = (id) => document.getElementById(id);
  const view = $("view");

  // ---- talking to the API ----

  class Unauthorized extends Error {}

  async function api(method, path, body) {
    const headers = {};
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (token) headers["Authorization"] = "Bearer " + token;
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const res = await fetch("/api/v1" + path, {
      method, headers, body: body === undefined ? undefined : JSON.stringify(body),
      cache: "no-store", credentials: "same-origin",
    });
    if (res.status === 401) throw new Unauthorized("missing or wrong token");
    const data = await res.json().catch(() => ({ error: res.statusText }));
    if (!res.ok) throw new Error(data.error || res.statusText);
    return data;
  }

  // ---- small helpers ----

  function esc(s) {
    return String(s ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
  }

  // time shows an RFC 3339 time in the browser's zone, its UTC value on
  // hover.
  function time(iso) {
    if (!iso || iso.startsWith("0001-")) return '<span class="muted">-</span>';
    const d = new Date(iso);
    return `<time datetime="${esc(d.toISOString())}" title="${esc(d.toISOString())} UTC">${esc(d.toLocaleString())}</time>`;
  }

  // until says how long from now (at, the report's time) iso is, with the
  // time itself.
  function until(iso, at) {
    const s = (new Date(iso) - new Date(at)) / 1000;
    return (s > 0 ? `in ${seconds(s)} (` : "(now, ") + time(iso) + ")";
  }

  function num(n, digits) {
    if (n === undefined || n === null) return "-";
    return digits === undefined ? Number(n).toLocaleString() : Number(n).toFixed(digits);
  }

  function seconds(s) {
    if (!s) return "0 s";
    if (s < 1) return (s * 1000).toFixed(0) + " ms";
    if (s < 120) return s.toFixed(1) + " s";
    if (s < 7200) return (s / 60).toFixed(1) + " min";
    return (s / 3600).toFixed(1) + " h";
  }

  function say(msg) {
    const st = $("status");
    st.textContent = msg;
    clearTimeout(say.timer);
    say.timer = setTimeout(() => { st.textContent = ""; }, 6000);
  }

  // confirmAction asks with the dialog; resolves true on Confirm.
  function confirmAction(text, okLabel) {
    const dlg = $("confirm");
    $("confirm-text").textContent = text;
    $("confirm-ok").textContent = okLabel || "Confirm";
    return new Promise((resolve) => {
      dlg.addEventListener("close", () => resolve(dlg.returnValue === "ok"), { once: true });
      dlg.returnValue = "";
      dlg.showModal();
      $("confirm-cancel").focus();
    });
  }

  // stateOf names what holds a tenant, as a class and words: paused while
  // it has paused jobs; held by what held its last deferred job while it
  // has jobs waiting or deferred; else running.
  function stateOf(row) {
    const pause = /^pause/i.test(row.held_by || "");
    if (row.paused > 0) return ["state-paused", pause ? row.held_by : "paused"];
    const waiting = row.nakd + row.moved + row.parked;
    if (row.held_by && !pause && (waiting > 0 || row.deferred_per_s > 0)) return ["state-held", "held by " + row.held_by];
    return ["", "running"];
  }

  // ---- routing and refreshing ----

  let generation = 0; // bumps on every route change: old loops stop

  // every runs fn now and again ms after each run ends, until the route
  // changes.
  function every(ms, fn) {
    const gen = generation;
    const loop = async () => {
      if (gen !== generation) return;
      try {
        await fn();
      } catch (e) {
        if (e instanceof Unauthorized) return signedOut();
        if (gen === generation) say(e.message);
      }
      if (gen === generation) setTimeout(loop, ms);
    };
    loop();
  }

  function route() {
    generation++;
    const hash = location.hash || "#/tenants";
    for (const a of document.querySelectorAll("nav a")) {
      if (hash.startsWith(a.getAttribute("href"))) a.setAttribute("aria-current", "page");
      else a.removeAttribute("aria-current");
    }
    let m;
    if ((m = hash.match(/^#\/tenant\/(.+)$/))) return tenantPage(decodeURIComponent(m[1]));
    if ((m = hash.match(/^#\/dlq\/(\d+)$/))) return deadLetterPage(m[1]);
    if (hash.startsWith("#/dlq")) return deadLettersPage();
    if (hash.startsWith("#/fleet")) return fleetPage();
    if (hash.startsWith("#/levels")) return levelsPage();
    return tenantsPage();
  }

  // ---- tenants ----

  const tenantsState = { q: "", sort: "waiting", order: "desc", offset: 0 };
  const columns = [
    ["tenant", "Tenant", false], ["admitted", "Admitted/s", true], ["deferred", "Deferred/s", true],
    ["waiting", "Waiting", true], [null, "NAK'd", true], [null, "Moved", true], [null, "Parked", true],
    [null, "Paused", true], ["oldest_wait", "Oldest wait", true], ["held_by", "State", false],
    ["dead_letters", "Dead letters (1 h)", true],
  ];

  function tenantsPage() {
    const st = tenantsState;
    view.innerHTML = `
      <h1>Tenants</h1>
      <div class="toolbar">
        <form class="inline" id="filter-form" role="search">
          <label for="filter">Filter by name</label>
          <input id="filter" type="search" value="${esc(st.q)}" autocomplete="off">
        </form>
        <span id="tenants-summary" class="muted" aria-live="off"></span>
      </div>
      <div class="table-wrap">
        <table id="tenants" aria-describedby="tenants-summary">
          <caption class="skip">Every tenant with traffic, refreshed every second</caption>
          <thead><tr>${columns.map(([key, label, numeric]) => {
            const cls = numeric ? ' class="num"' : "";
            if (!key) return `<th scope="col"${cls}>${label}</th>`;
            return `<th scope="col"${cls} data-key="${key}"><button type="button" data-sort="${key}">${label}</button></th>`;
          }).join("")}</tr></thead>
          <tbody></tbody>
        </table>
      </div>
      <div class="toolbar">
        <button type="button" id="prev">Previous page</button>
        <button type="button" id="next">Next page</button>
        <span id="page-info" class="muted"></span>
      </div>`;
    const filter = $("filter");
    let debounce;
    filter.addEventListener("input", () => {
      clearTimeout(debounce);
      debounce = setTimeout(() => { st.q = filter.value.trim(); st.offset = 0; refresh(); }, 150);
    });
    $("filter-form").addEventListener("submit", (e) => { e.preventDefault(); st.q = filter.value.trim(); st.offset = 0; refresh(); });
    view.querySelector("thead").addEventListener("click", (e) => {
      const b = e.target.closest("button[data-sort]");
      if (!b) return;
      const key = b.dataset.sort;
      if (st.sort === key) st.order = st.order === "asc" ? "desc" : "asc";
      else { st.sort = key; st.order = key === "tenant" || key === "held_by" ? "asc" : "desc"; }
      st.offset = 0;
      refresh();
    });
    $("prev").addEventListener("click", () => { st.offset = Math.max(0, st.offset - PAGE); refresh(); });
    $("next").addEventListener("click", () => { st.offset += PAGE; refresh(); });

    let seq = 0;
    async function refresh() {
      const mine = ++seq;
      const started = performance.now();
      const qs = new URLSearchParams({ q: st.q, sort: st.sort, order: st.order, offset: st.offset, limit: PAGE });
      const page = await api("GET", "/tenants?" + qs);
      if (mine !== seq || !document.getElementById("tenants")) return; // a newer refresh, or another page
      renderTenants(page, st);
      const table = $("tenants");
      table.dataset.at = page.at;
      table.dataset.renders = String(Number(table.dataset.renders || 0) + 1);
      table.dataset.lastMs = (performance.now() - started).toFixed(1);
      // The page's own timings, for the benchmark and the curious: the
      // first render since the page was opened, and each refresh (its
      // request and its rendering), the last 100.
      const tm = timings.tenants;
      if (tm.firstRenderMs === null) tm.firstRenderMs = performance.now();
      else tm.refreshMs.push(performance.now() - started);
      if (tm.refreshMs.length > 100) tm.refreshMs.shift();
    }
    every(REFRESH_MS, refresh);
  }

  function renderTenants(page, st) {
    for (const th of view.querySelectorAll("th[data-key]")) {
      th.setAttribute("aria-sort", th.dataset.key === st.sort ? (st.order === "asc" ? "ascending" : "descending") : "none");
    }
    const rows = page.rows.map((r) => {
      const [cls, words] = stateOf(r);
      const waiting = r.nakd + r.moved + r.parked + r.paused;
      return `<tr data-tenant="${esc(r.tenant)}">
        <th scope="row"><a href="#/tenant/${encodeURIComponent(r.tenant)}">${esc(r.tenant)}</a></th>
        <td class="num">${num(r.admitted_per_s, 1)}</td><td class="num">${num(r.deferred_per_s, 1)}</td>
        <td class="num">${num(waiting)}</td><td class="num">${num(r.nakd)}</td><td class="num">${num(r.moved)}</td>
        <td class="num">${num(r.parked)}</td><td class="num">${num(r.paused)}</td>
        <td class="num">${seconds(r.oldest_wait_s)}</td><td class="state ${cls}">${esc(words)}</td>
        <td class="num">${num(r.dead_letters_1h)}</td></tr>`;
    }).join("");
    view.querySelector("#tenants tbody").innerHTML = rows ||
      `<tr><td colspan="${columns.length}" class="muted">No tenant${st.q ? " matches" : " has traffic"}.</td></tr>`;
    const last = Math.min(page.offset + page.rows.length, page.matched);
    $("page-info").textContent = page.matched ? `Tenants ${page.offset + 1} to ${last} of ${page.matched}` : "";
    $("prev").disabled = page.offset === 0;
    $("next").disabled = last >= page.matched;
    $("tenants-summary").textContent = `${page.tenants} tenants, ${page.workers} workers answering; refreshed ${new Date(page.at).toLocaleTimeString()}`;
  }

  // ---- one tenant ----

  function tenantPage(t) {
    const path = "/tenants/" + encodeURIComponent(t);
    view.innerHTML = `
      <p><a href="#/tenants">All tenants</a></p>
      <h1>Tenant <span id="tenant-name">${esc(t)}</span> <span id="tenant-state" class="muted"></span></h1>
      <div class="cards">
        <section class="card" aria-labelledby="h-limits">
          <h2 id="h-limits">Limits</h2>
          <p id="limits-now" class="muted">Loading…</p>
          <form class="inline" id="limits-form">
            <label for="limits-spec">New limits</label>
            <input id="limits-spec" placeholder="50/s:100+10000/d" autocomplete="off" required aria-describedby="limits-error">
            <button type="submit" class="primary" id="limits-save">Save limits</button>
            <button type="button" id="limits-remove" hidden>Back to the environment's</button>
          </form>
          <p id="limits-error" class="error" role="alert"></p>
        </section>
        <section class="card" aria-labelledby="h-actions">
          <h2 id="h-actions">Actions</h2>
          <form class="inline" id="pause-form">
            <label for="pause-reason">Reason</label>
            <input id="pause-reason" autocomplete="off" placeholder="optional">
            <button type="submit" id="pause">Pause</button>
            <button type="button" id="resume">Resume</button>
          </form>
          <p><button type="button" id="purge" class="danger">Purge waiting jobs…</button></p>
          <p id="action-error" class="error" role="alert"></p>
        </section>
        <section class="card" aria-labelledby="h-wait">
          <h2 id="h-wait">A new job</h2>
          <p id="wait">Loading…</p>
          <h2>Jobs waiting</h2>
          <dl class="kv" id="waiting"></dl>
          <h2>Caps</h2>
          <div id="caps" class="muted">None.</div>
          <h2>Limits above the tenant</h2>
          <div id="tenant-levels" class="muted">None.</div>
        </section>
      </div>
      <section aria-labelledby="h-buckets">
        <h2 id="h-buckets">Buckets</h2>
        <div id="buckets"></div>
      </section>
      <section class="chart" aria-labelledby="h-chart">
        <h2 id="h-chart">Admitted and deferred per second, since this page opened</h2>
        <p><span class="legend-admitted">━ admitted</span> <span class="legend-deferred">━ deferred</span> <span id="chart-now" class="muted"></span></p>
        <svg id="chart" viewBox="0 0 600 140" preserveAspectRatio="none" role="img" aria-labelledby="chart-now"></svg>
      </section>
      <section aria-labelledby="h-dlq">
        <h2 id="h-dlq">Recent dead letters <a href="#/dlq" id="all-dlq">(all of ${esc(t)}'s)</a></h2>
        <div id="tenant-dlq" class="muted">Loading…</div>
      </section>`;

    $("all-dlq").addEventListener("click", () => { dlqFilter.tenant = t; dlqFilter.reason = ""; dlqFilter.since = ""; });
    $("limits-form").addEventListener("submit", async (e) => {
      e.preventDefault();
      $("limits-error").textContent = "";
      const spec = $("limits-spec").value;
      try {
        const ch = await api("PUT", path + "/limits", { spec });
        say(`${t}: limits ${ch.before} → ${ch.after} (revision ${ch.revision}); every worker applies them within a second`);
        $("limits-spec").value = "";
        await inspectNow();
      } catch (err) {
        if (err instanceof Unauthorized) return signedOut();
        $("limits-error").textContent = err.message;
        $("limits-spec").focus();
      }
    });
    // The tenant's own value removed from the limits bucket: the
    // environment's limits (or _default's) apply again.
    $("limits-remove").addEventListener("click", async () => {
      $("limits-error").textContent = "";
      try {
        const ch = await api("DELETE", path + "/limits");
        say(ch.removed ? `${t}: limits ${ch.before} → ${ch.after}, removed from the bucket; every worker applies them within a second`
          : `${t}: no limits of its own in the bucket; nothing removed`);
        await inspectNow();
      } catch (err) {
        if (err instanceof Unauthorized) return signedOut();
        $("limits-error").textContent = err.message;
      }
    });
    const act = async (fn) => {
      $("action-error").textContent = "";
      try { await fn(); await inspectNow(); } catch (err) {
        if (err instanceof Unauthorized) return signedOut();
        $("action-error").textContent = err.message;
      }
    };
    $("pause-form").addEventListener("submit", (e) => {
      e.preventDefault();
      act(async () => { await api("POST", path + "/pause", { reason: $("pause-reason").value }); say(`${t} paused`); });
    });
    $("resume").addEventListener("click", () => act(async () => { await api("POST", path + "/resume", {}); say(`${t} resumed`); }));
    $("purge").addEventListener("click", () => act(async () => {
      const dry = await api("POST", path + "/purge", { dry_run: true });
      const n = dry.removed || 0;
      if (!(await confirmAction(`Remove ${n} waiting job${n === 1 ? "" : "s"} of ${t}? They are deleted, not run.`, `Remove ${n} jobs`))) return;
      const done = await api("POST", path + "/purge", {});
      say(`${t}: ${done.removed} waiting jobs removed`);
    }));

    const points = [];
    async function inspectNow() {
      const rep = await api("GET", path);
      renderInspection(rep);
    }
    every(REFRESH_MS, async () => {
      const [rep, top] = await Promise.all([api("GET", path), api("GET", "/tenants?" + new URLSearchParams({ name: t }))
        .catch((e) => { if (e instanceof Unauthorized) throw e; return null; })]);
      renderInspection(rep);
      const row = top && top.rows[0];
      renderTopRow(row);
      points.push({ at: Date.now(), a: row ? row.admitted_per_s : 0, d: row ? row.deferred_per_s : 0 });
      if (points.length > CHART_POINTS) points.shift();
      renderChart(points);
    });
    every(5000, async () => {
      // The last day's, the newest first: the list runs oldest first.
      const since = new Date(Date.now() - 24 * 3600 * 1000).toISOString().replace(/\.\d+Z$/, "Z");
      const list = await api("GET", "/dlq?" + new URLSearchParams({ tenant: t, since, limit: 100000 }));
      const recent = list.slice(-10).reverse();
      $("tenant-dlq").innerHTML = recent.length ? deadLetterTable(recent, false) : "None in the last 24 hours.";
    });
  }

  function renderInspection(rep) {
    const src = rep.source || {};
    const where = src.revision ? `${src.where} (revision ${src.revision}, written ${time(src.written)})` : esc(src.where);
    $("limits-now").innerHTML = `<strong id="limits-value">${esc(rep.limits)}</strong> from ${where}${rep.shadow ? " — shadow mode: counted, not enforced" : ""}` +
      (src.ignored ? `<br><span class="error">Ignored, as unreadable: ${esc(src.ignored)}</span>` : "");
    $("limits-now").classList.remove("muted");
    $("limits-remove").hidden = src.where !== "bucket";
    const paused = rep.paused && rep.paused.active;
    $("tenant-state").textContent = paused ? "(paused)" : "";
    $("tenant-state").dataset.paused = paused ? "1" : "0";
    let wait;
    if (paused) wait = `Paused${rep.paused.reason ? " (" + esc(rep.paused.reason) + ")" : ""}: no worker starts its jobs until it is resumed.`;
    else if (rep.waits_for_lease) wait = "Waits for a lease of a running cap.";
    else if (rep.wait_seconds > 0) wait = `Waits <strong>${seconds(rep.wait_seconds)}</strong>, set by <strong id="held-by">${esc(rep.held_by)}</strong>.`;
    else wait = "Runs at once.";
    $("wait").innerHTML = wait;
    $("buckets").innerHTML = (rep.buckets || []).map((b) => `
      <div class="bar">
        <label for="bucket-${esc(b.limit)}">${esc(b.limit)}</label>
        <meter id="bucket-${esc(b.limit)}" min="0" max="${b.burst}" value="${Math.max(0, b.tokens)}" low="${b.burst * 0.2}" optimum="${b.burst}">${num(Math.max(0, b.tokens), 2)} of ${b.burst}</meter>
        <span></span>
        <span class="muted">${b.tokens >= 0 ? `${num(b.tokens, 2)} of ${b.burst} tokens` : `empty, ${num(-b.tokens, 0)} tokens reserved ahead`}; full again ${until(b.full_at, rep.at)}${b.wait_seconds > 0 ? `; a new job waits ${seconds(b.wait_seconds)}` : ""}</span>
      </div>`).join("") || '<p class="muted">No rate limit.</p>';
    const caps = [];
    if (rep.cap) caps.push(`Running cap ${rep.running_cap}: ${rep.cap.running ?? 0} running, ${rep.cap.called ?? 0} called back, ${rep.cap.waiting ?? 0} waiting`);
    if (rep.fleet_cap) caps.push(`Fleet cap ${rep.max_running}: ${rep.fleet_cap.running ?? 0} running, ${rep.fleet_cap.called ?? 0} called back, ${rep.fleet_cap.waiting ?? 0} waiting`);
    $("caps").innerHTML = caps.length ? caps.map(esc).join("<br>") : "None.";
    $("caps").classList.toggle("muted", !caps.length);
    renderTenantLevels(rep.levels);
    const j = rep.jobs || {};
    $("waiting").dataset.slots = String((j.holding_slots || {}).n || 0);
    renderWaiting();
  }

  // The limits above a tenant (the global one, groups read per job) and
  // the levels whose lists hold its jobs waiting for a turn: the holding
  // level, not only the tenant, can be why its jobs wait.
  function renderTenantLevels(lv) {
    const el = $("tenant-levels");
    const parts = [];
    if (lv && lv.global) parts.push(`Global limit <strong>${esc(lv.global)}</strong>${lv.global_source ? ", from " + esc(lv.global_source.where) : ""}`);
    if (lv && lv.group_from) parts.push(`Group limits, the group read from each job (${esc(lv.group_from)})`);
    for (const q of (lv && lv.holding) || []) {
      const n = q.jobs || {};
      parts.push(`<span data-level="${esc(q.level)}"><a href="#/levels">${esc(q.level)}</a> holds <strong>${n.exact === false ? "at least " : ""}${num(n.n || 0)}</strong> of its jobs waiting for a turn: ` +
        `${num(q.ahead)} of the list's ${num(q.queued)} are called before them</span>`);
    }
    el.innerHTML = parts.length ? parts.join("<br>") : "None.";
    el.classList.toggle("muted", !parts.length);
  }

  let lastRow = null;
  function renderTopRow(row) { lastRow = row; renderWaiting(); }

  function renderWaiting() {
    const el = $("waiting");
    if (!el) return;
    const r = lastRow || { nakd: 0, moved: 0, parked: 0, paused: 0, oldest_wait_s: 0 };
    el.innerHTML = `<dt>NAK'd on the consumer</dt><dd>${num(r.nakd)}</dd><dt>Moved off the consumer</dt><dd>${num(r.moved)}</dd>
      <dt>Parked (for a lease or a turn)</dt><dd>${num(r.parked)}</dd><dt>Paused</dt><dd>${num(r.paused)}</dd>
      <dt>Holding a reserved slot</dt><dd>${num(Number(el.dataset.slots || 0))}</dd><dt>Oldest wait</dt><dd>${seconds(r.oldest_wait_s)}</dd>`;
  }

  function renderChart(points) {
    const svg = $("chart");
    if (!svg) return;
    const w = 600, h = 140;
    const top = Math.max(1, ...points.map((p) => Math.max(p.a, p.d)));
    // Newest at the right; the scale widens as points come, to 5 minutes.
    const span = Math.max(points.length, 60) - 1;
    const x0 = span - (points.length - 1);
    const line = (key) => points.map((p, i) => `${((x0 + i) / span) * w},${h - 4 - (p[key] / top) * (h - 12)}`).join(" ");
    svg.dataset.points = String(points.length);
    svg.innerHTML = `<polyline fill="none" stroke="#1a7f37" stroke-width="2" points="${line("a")}"/>` +
      `<polyline fill="none" stroke="#bc4c00" stroke-width="2" points="${line("d")}"/>`;
    const last = points[points.length - 1];
    $("chart-now").textContent = `now ${num(last.a, 1)} admitted/s, ${num(last.d, 1)} deferred/s; scale up to ${num(top, 1)}/s`;
  }

  // ---- dead letters ----

  function deadLetterTable(list, selectable) {
    return `<div class="table-wrap"><table class="dlq"><thead><tr>
      ${selectable ? '<th scope="col"><span class="skip">Select</span></th>' : ""}
      <th scope="col">Id</th><th scope="col">Dead-lettered</th><th scope="col">Tenant</th><th scope="col">Reason</th>
      <th scope="col" class="num">Failures</th><th scope="col" class="num hide-narrow">Size</th></tr></thead><tbody>
      ${list.map((d) => `<tr data-id="${d.id}">
        ${selectable ? `<td><input type="checkbox" class="pick" value="${d.id}" id="pick-${d.id}" aria-label="Select dead letter ${d.id}"></td>` : ""}
        <td><a href="#/dlq/${d.id}">${d.id}</a></td><td>${time(d.time)}</td>
        <td><a href="#/tenant/${encodeURIComponent(d.tenant)}">${esc(d.tenant)}</a></td><td>${esc(d.reason)}</td>
        <td class="num">${num(d.failures)}</td><td class="num hide-narrow">${num(d.size)}</td></tr>`).join("")}
      </tbody></table></div>`;
  }

  const dlqFilter = { tenant: "", reason: "", since: "" };

  function deadLettersPage() {
    view.innerHTML = `
      <h1>Dead letters</h1>
      <form class="toolbar" id="dlq-filter" role="search">
        <span><label for="dlq-tenant">Tenant</label><input id="dlq-tenant" value="${esc(dlqFilter.tenant)}" autocomplete="off"></span>
        <span><label for="dlq-reason">Reason contains</label><input id="dlq-reason" value="${esc(dlqFilter.reason)}" autocomplete="off"></span>
        <span><label for="dlq-since">Since</label><input id="dlq-since" type="datetime-local" value="${esc(dlqFilter.since)}"></span>
        <button type="submit">Apply</button>
      </form>
      <div class="toolbar">
        <button type="button" id="dlq-replay" class="primary">Replay selected…</button>
        <button type="button" id="dlq-purge" class="danger">Purge selected…</button>
        <button type="button" id="dlq-refresh">Refresh</button>
        <span id="dlq-count" class="muted"></span>
      </div>
      <p id="dlq-error" class="error" role="alert"></p>
      <div id="dlq-list">Loading…</div>`;
    const load = async () => {
      const qs = new URLSearchParams();
      if (dlqFilter.tenant) qs.set("tenant", dlqFilter.tenant);
      if (dlqFilter.reason) qs.set("reason", dlqFilter.reason);
      if (dlqFilter.since) qs.set("since", new Date(dlqFilter.since).toISOString().replace(/\.\d+Z$/, "Z"));
      try {
        const list = await api("GET", "/dlq?" + qs);
        $("dlq-list").innerHTML = list.length ? deadLetterTable(list, true) : '<p class="muted">No dead letters.</p>';
        $("dlq-count").textContent = `${list.length} dead letters`;
        $("dlq-list").dataset.loaded = String(Date.now());
      } catch (err) {
        if (err instanceof Unauthorized) return signedOut();
        $("dlq-error").textContent = err.message;
      }
    };
    $("dlq-filter").addEventListener("submit", (e) => {
      e.preventDefault();
      dlqFilter.tenant = $("dlq-tenant").value.trim();
      dlqFilter.reason = $("dlq-reason").value.trim();
      dlqFilter.since = $("dlq-since").value;
      load();
    });
    $("dlq-refresh").addEventListener("click", load);
    const selected = () => [...view.querySelectorAll("input.pick:checked")].map((c) => Number(c.value));
    const bulk = (verb, path) => async () => {
      $("dlq-error").textContent = "";
      const ids = selected();
      if (!ids.length) { $("dlq-error").textContent = "Select dead letters first."; return; }
      if (!(await confirmAction(`${verb} ${ids.length} dead letter${ids.length === 1 ? "" : "s"}?`, `${verb} ${ids.length}`))) return;
      try {
        const res = await api("POST", path, { ids });
        say(resultWords(verb, res, ids.length));
        await load();
      } catch (err) {
        if (err instanceof Unauthorized) return signedOut();
        $("dlq-error").textContent = err.message;
      }
    };
    $("dlq-replay").addEventListener("click", bulk("Replay", "/dlq/replay"));
    $("dlq-purge").addEventListener("click", bulk("Purge", "/dlq/purge"));
    load();
  }

  function resultWords(verb, res, asked) {
    if (res && Array.isArray(res.replayed)) return `${res.replayed.length} replayed, ${(res.skipped || []).length} skipped`;
    if (res && Array.isArray(res.removed)) return `${res.removed.length} purged`;
    return `${verb}: ${asked} done`;
  }

  function deadLetterPage(id) {
    view.innerHTML = `<p><a href="#/dlq">All dead letters</a></p><h1>Dead letter ${esc(id)}</h1>
      <div id="dl">Loading…</div>
      <div class="toolbar"><button type="button" id="dl-replay" class="primary">Replay…</button>
      <button type="button" id="dl-purge" class="danger">Purge…</button></div>
      <p id="dl-error" class="error" role="alert"></p>`;
    const one = async (verb, path) => {
      $("dl-error").textContent = "";
      if (!(await confirmAction(`${verb} dead letter ${id}?`, verb))) return;
      try {
        const res = await api("POST", path, { ids: [Number(id)] });
        say(resultWords(verb, res, 1));
        location.hash = "#/dlq";
      } catch (err) {
        if (err instanceof Unauthorized) return signedOut();
        $("dl-error").textContent = err.message;
      }
    };
    $("dl-replay").addEventListener("click", () => one("Replay", "/dlq/replay"));
    $("dl-purge").addEventListener("click", () => one("Purge", "/dlq/purge"));
    (async () => {
      try {
        const d = await api("GET", "/dlq/" + id);
        let data = "";
        try { data = d.data ? new TextDecoder().decode(Uint8Array.from(atob(d.data), (c) => c.charCodeAt(0))) : ""; } catch { data = d.data; }
        const headers = Object.entries(d.headers || {}).map(([k, v]) => `<dt>${esc(k)}</dt><dd>${esc([].concat(v).join(", "))}</dd>`).join("");
        $("dl").innerHTML = `<dl class="kv">
          <dt>Tenant</dt><dd><a href="#/tenant/${encodeURIComponent(d.tenant)}">${esc(d.tenant)}</a></dd>
          <dt>Reason</dt><dd>${esc(d.reason)}</dd><dt>Dead-lettered</dt><dd>${time(d.time)}</dd>
          <dt>Failures</dt><dd>${num(d.failures)}</dd><dt>Subject</dt><dd>${esc(d.subject || "-")}</dd>
          <dt>Job</dt><dd>${esc(d.job_id || "-")}</dd><dt>Size</dt><dd>${num(d.size)} bytes${d.truncated ? " (cut to fit: " + esc(d.truncated) + ")" : ""}</dd></dl>
          <h2>Headers</h2><dl class="kv" id="dl-headers">${headers || "<dd>None.</dd>"}</dl>
          <h2>Data${d.data_cut ? ` (the first bytes; ${num(d.data_cut)} more)` : ""}</h2><pre id="dl-data">${esc(data)}</pre>`;
      } catch (err) {
        if (err instanceof Unauthorized) return signedOut();
        $("dl").textContent = err.message;
      }
    })();
  }

  // ---- the limits above the tenants ----

  function levelsPage() {
    view.innerHTML = `<h1>Limits above the tenants</h1>
      <p class="muted">The global limit and the groups' (THROTTLER_GLOBAL_LIMIT, THROTTLER_GROUP_LIMITS, the limits bucket's
      _global and group.NAME keys): the jobs each holds waiting for a turn, and who is next.</p><div id="levels">Loading…</div>`;
    every(2 * REFRESH_MS, async () => {
      const r = await api("GET", "/levels");
      const rows = (r.levels || []).map((l) => {
        const next = (l.next_in_line || []).slice(0, 3).map((n) => `<a href="#/tenant/${encodeURIComponent(n.tenant)}">${esc(n.tenant)}</a> (${num(n.jobs)})`).join(", ");
        const wait = l.wait_seconds > 0 ? `${seconds(l.wait_seconds)}, set by ${esc(l.held_by)}` : "none";
        return `<tr data-level="${esc(l.level)}"><th scope="row">${esc(l.level)}</th><td>${esc(l.limits)}${l.shadow ? " (shadow)" : ""}</td>
          <td>${esc((l.source || {}).where || "")}</td><td class="num">${num(l.queued)}</td><td class="num">${num(l.flows_waiting)}</td>
          <td>${wait}</td><td class="num">${num(l.passes)}</td><td>${next || "—"}</td></tr>` +
          (l.note ? `<tr><td colspan="8" class="error">${esc(l.note)}</td></tr>` : "");
      }).join("");
      $("levels").innerHTML = `<div class="table-wrap"><table id="levels-table"><thead><tr><th scope="col">Level</th><th scope="col">Limits</th>
        <th scope="col">From</th><th scope="col">Waiting for a turn</th><th scope="col">Flows waiting</th><th scope="col">A new job waits</th>
        <th scope="col">Slots granted, unused</th><th scope="col">Next in line</th></tr></thead><tbody>${rows}</tbody></table></div>`;
    });
  }

  // ---- the fleet ----

  function fleetPage() {
    view.innerHTML = `<h1>Fleet</h1>
      <div class="figures" id="totals"></div>
      <h2>Workers</h2><p id="workers-error" class="error" role="alert"></p><div id="workers">Loading…</div>`;
    every(2 * REFRESH_MS, async () => {
      const f = await api("GET", "/fleet");
      const t = f.totals || {};
      $("totals").innerHTML = [
        ["Jobs admitted per second", num(t.admitted_per_s, 1)], ["Jobs deferred per second", num(t.deferred_per_s, 1)],
        ["Jobs waiting", num(t.waiting)], ["Dead letters, last hour", num(t.dead_letters_1h)],
        ["Tenants with traffic", num(f.tenants)], ["Workers up", num(f.workers.length)],
      ].map(([k, v]) => `<div class="figure"><div class="muted">${k}</div><div class="value">${v}</div></div>`).join("") +
        (f.totals_error ? `<p class="error">${esc(f.totals_error)}</p>` : "");
      $("workers-error").textContent = f.workers_error || "";
      $("workers").innerHTML = `<div class="table-wrap"><table id="workers-table"><thead><tr><th scope="col">Worker</th><th scope="col">Host</th>
        <th scope="col">Version</th><th scope="col">Started</th><th scope="col">Ready</th></tr></thead><tbody>
        ${f.workers.map((w) => `<tr><th scope="row">${esc(w.id)}</th><td>${esc(w.host)}</td><td>${esc(w.version)}</td><td>${time(w.started)}</td>
          <td>${w.ready ? "ready" : `<span class="state-held">not ready</span>: ${esc((w.problems || []).join("; "))}`}</td></tr>`).join("")}
        </tbody></table></div><p class="muted">This worker: ${esc(f.version)}; refreshed ${time(f.at)}</p>`;
    });
  }

  // ---- signing in ----

  function signedOut() {
    generation++;
    sessionStorage.removeItem(TOKEN_KEY);
    view.innerHTML = "";
    $("nav").hidden = true;
    $("forget").hidden = true;
    $("login").hidden = false;
    $("token").focus();
  }

  function signedIn() {
    $("login").hidden = true;
    $("nav").hidden = false;
    $("forget").hidden = headerAuth;
    route();
  }

  $("login-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    $("login-error").textContent = "";
    sessionStorage.setItem(TOKEN_KEY, $("token").value.trim());
    try {
      await api("GET", "/fleet");
      $("token").value = "";
      signedIn();
    } catch (err) {
      sessionStorage.removeItem(TOKEN_KEY);
      $("login-error").textContent = err instanceof Unauthorized ? "That token is wrong." : err.message;
    }
  });
  $("forget").addEventListener("click", signedOut);
  window.addEventListener("hashchange", () => { if ($("login").hidden) route(); });

  if (headerAuth) signedIn();
  else if (sessionStorage.getItem(TOKEN_KEY)) api("GET", "/fleet").then(signedIn, signedOut);
  else signedOut();
})();
