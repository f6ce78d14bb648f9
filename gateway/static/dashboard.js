// Live dashboard of the DLFP Gateway. Once a second it fetches this gateway's
// /metrics (same origin), parses the Prometheus text format and draws inline SVG.
// No dependencies and nothing from any other origin. History lives in this tab.
// With DLFP_METRICS_TOKEN set, /metrics answers 401 until the page sends the token:
// it asks for it once, keeps it in sessionStorage (this tab only) and sends it as a
// bearer header.
"use strict";

(() => {
  const REFRESH_MS = 1000;
  const FETCH_TIMEOUT_MS = 8000;
  const MAX_RETRY_MS = 16000;
  const HISTORY_S = 300; // the line charts span the last five minutes
  const MINUTE_S = 60; // the "last minute" histograms
  const WINDOW_S = 10; // each quantile point and each rate covers this sliding window
  const MIN_BARS = 12;
  const MAX_TENANT_ROWS = 8; // the tenants tile lists the busiest ones

  // ---- Prometheus text format ------------------------------------------------

  // name{labels} value [timestamp]; label values may hold escaped quotes and braces.
  const SAMPLE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)/;
  const LABEL = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;

  function parseValue(text) {
    if (text === "+Inf") return Infinity;
    if (text === "-Inf") return -Infinity;
    return Number(text);
  }

  function unescapeLabel(text) {
    return text.replace(/\\(.)/g, (_, c) => (c === "n" ? "\n" : c));
  }

  /** Map of metric name -> [{labels, value}], for the samples whose name starts with `prefix`. */
  function parseMetrics(text, prefix) {
    const metrics = new Map();
    for (const line of text.split("\n")) {
      if (!line.startsWith(prefix)) continue; // also skips "# HELP" and "# TYPE"
      const m = SAMPLE.exec(line);
      if (!m) continue;
      const labels = {};
      for (const l of (m[2] || "").matchAll(LABEL)) labels[l[1]] = unescapeLabel(l[2]);
      if (!metrics.has(m[1])) metrics.set(m[1], []);
      metrics.get(m[1]).push({ labels, value: parseValue(m[3]) });
    }
    return metrics;
  }

  function scalar(metrics, name) {
    const samples = metrics.get(name);
    return samples && samples.length ? samples[0].value : null;
  }

  function sumWhere(metrics, name, keep) {
    return (metrics.get(name) || []).filter((s) => keep(s.labels)).reduce((a, s) => a + s.value, 0);
  }

  // ---- histograms ------------------------------------------------------------

  /** Cumulative bucket counts in ascending `le` order (the last bound is +Inf), or null. */
  function histogram(metrics, name) {
    const buckets = (metrics.get(name + "_bucket") || [])
      .map((s) => ({ le: parseValue(s.labels.le), cum: s.value }))
      .sort((a, b) => a.le - b.le);
    return buckets.length ? { le: buckets.map((b) => b.le), cum: buckets.map((b) => b.cum) } : null;
  }

  function total(h) {
    return h ? h.cum[h.cum.length - 1] : 0;
  }

  /** The observations made between two snapshots of one histogram. */
  function delta(now, then) {
    if (!now || !then || then.le.length !== now.le.length) return now;
    return { le: now.le, cum: now.cum.map((c, i) => c - then.cum[i]) };
  }

  function bucketCounts(h) {
    return h.cum.map((c, i) => (i === 0 ? c : c - h.cum[i - 1]));
  }

  /** Prometheus's histogram_quantile: linear interpolation inside the bucket holding the rank. */
  function quantile(q, h) {
    const n = total(h);
    if (!(n > 0)) return null;
    const rank = q * n;
    const i = h.cum.findIndex((c) => c >= rank);
    if (h.le[i] === Infinity) return h.le.length > 1 ? h.le[h.le.length - 2] : null;
    const lower = i === 0 ? 0 : h.le[i - 1];
    const below = i === 0 ? 0 : h.cum[i - 1];
    return lower + ((h.le[i] - lower) * (rank - below)) / (h.cum[i] - below);
  }

  // ---- state -----------------------------------------------------------------

  const snapshots = []; // cumulative counters, oldest first, spanning a bit over MINUTE_S
  const samples = []; // one per refresh over HISTORY_S, for the line charts
  let view = null; // what the histograms and tiles show, kept for redraws on resize
  let numUpdates = 0;

  /** The newest snapshot at least `age_s` older than `t`, else the oldest one kept. */
  function snapshotBefore(t, ageS) {
    let found = snapshots[0];
    for (const s of snapshots) {
      if (s.t > t - ageS) break;
      found = s;
    }
    return found;
  }

  function isReset(now, then) {
    return total(now.itl) < total(then.itl) || total(now.ttft) < total(then.ttft) || now.tokens < then.tokens;
  }

  function perSecond(now, then, key) {
    const dt = now.t - then.t;
    return dt > 0 ? (now[key] - then[key]) / dt : null;
  }

  /** Per tenant: the slots it holds now, and the counters its window rates come from. */
  function tenantTotals(metrics) {
    const tenants = {};
    const of = (s) => (tenants[s.labels.tenant] ||= { slots: 0, tokens: 0, ok: 0, shed: 0 });
    for (const s of metrics.get("dlfp_tenant_slots_in_use") || []) of(s).slots += s.value;
    for (const s of metrics.get("dlfp_tenant_completion_tokens_total") || []) of(s).tokens += s.value;
    for (const s of metrics.get("dlfp_tenant_requests_total") || []) {
      if (s.labels.outcome === "ok" || s.labels.outcome === "shed") of(s)[s.labels.outcome] += s.value;
    }
    return tenants;
  }

  /** One row per tenant, busiest first: slots now; tokens/s and requests ok, shed over the window. */
  function tenantRows(now, then) {
    const dt = now.t - then.t;
    const rows = Object.entries(now.tenants).map(([name, n]) => {
      // A tenant the base lacks has no window yet: count nothing rather than since start.
      const base = then.tenants[name] || n;
      const tokensPerS = dt > 0 ? (n.tokens - base.tokens) / dt : null;
      return { name, slots: n.slots, tokensPerS, ok: n.ok - base.ok, shed: n.shed - base.shed };
    });
    return rows.sort((a, b) =>
      b.slots - a.slots || b.ok + b.shed - (a.ok + a.shed) || a.name.localeCompare(b.name));
  }

  function update(text) {
    const metrics = parseMetrics(text, "dlfp_");
    const t = performance.now() / 1000;
    const outcomes = {};
    for (const s of metrics.get("dlfp_requests_total") || []) {
      outcomes[s.labels.outcome] = (outcomes[s.labels.outcome] || 0) + s.value;
    }
    const rejections = {};
    for (const s of metrics.get("dlfp_admission_rejections_total") || []) {
      rejections[s.labels.reason] = (rejections[s.labels.reason] || 0) + s.value;
    }
    const goodput = {};
    for (const s of metrics.get("dlfp_goodput_requests_total") || []) {
      const g = goodput[s.labels.source] || (goodput[s.labels.source] = { met: 0, all: 0 });
      g.all += s.value;
      if (s.labels.met === "true") g.met += s.value;
    }
    const snap = {
      t,
      itl: histogram(metrics, "dlfp_itl_seconds"),
      ttft: histogram(metrics, "dlfp_ttft_seconds"),
      ok: outcomes.ok || 0,
      tokens: scalar(metrics, "dlfp_generation_tokens_total") || 0,
      tenants: tenantTotals(metrics),
    };
    // A restarted gateway starts its counters again: differences across it mean nothing.
    if (snapshots.length && isReset(snap, snapshots[snapshots.length - 1])) snapshots.length = 0;
    snapshots.push(snap);
    while (snapshots.length > 1 && snapshots[1].t <= t - MINUTE_S) snapshots.shift();

    const minuteBase = snapshotBefore(t, MINUTE_S);
    const windowBase = snapshotBefore(t, WINDOW_S);
    const itlWindow = delta(snap.itl, windowBase.itl);
    const ttftWindow = delta(snap.ttft, windowBase.ttft);
    const observation = scalar(metrics, "dlfp_controller_observation_seconds");
    const target = scalar(metrics, "dlfp_controller_target_seconds");
    samples.push({
      t,
      itl50: ms(quantile(0.5, itlWindow)),
      itl99: ms(quantile(0.99, itlWindow)),
      ttft50: quantile(0.5, ttftWindow),
      ttft99: quantile(0.99, ttftWindow),
      // -1: no cap in force (a gap in the line); 0: a step that carried no prefill.
      cap: capOrNull(scalar(metrics, "dlfp_controller_cap_tokens")),
      margin: scalar(metrics, "dlfp_controller_margin"),
      deadlineSteps: scalar(metrics, "dlfp_controller_deadline_steps_total"),
      deadlineMisses: scalar(metrics, "dlfp_controller_deadline_misses_total"),
      zeroPrefillSteps: scalar(metrics, "dlfp_controller_zero_prefill_steps_total"),
      // 0 means the controller has observed no mixed iteration yet.
      observation: observation ? ms(observation) : null,
      target: target ? ms(target) : null,
      active: scalar(metrics, "dlfp_active_requests"),
      queued: scalar(metrics, "dlfp_queued_requests"),
    });
    while (samples.length && samples[0].t < t - HISTORY_S) samples.shift();

    view = {
      snap,
      outcomes,
      goodput,
      rejections,
      minuteAgeS: t - minuteBase.t,
      itlMinute: delta(snap.itl, minuteBase.itl),
      ttftMinute: delta(snap.ttft, minuteBase.ttft),
      okPerS: perSecond(snap, windowBase, "ok"),
      tokensPerS: perSecond(snap, windowBase, "tokens"),
      tenants: tenantRows(snap, windowBase),
    };
  }

  // ---- formatting ------------------------------------------------------------

  function ms(seconds) {
    return seconds === null || seconds === undefined ? null : seconds * 1000;
  }

  function capOrNull(v) {
    return v === null || v === undefined || v < 0 ? null : v;
  }

  function fmt(v) {
    if (v === null || v === undefined || Number.isNaN(v)) return "–";
    const a = Math.abs(v);
    const digits = a >= 100 || Number.isInteger(v) ? 0 : a >= 10 ? 1 : a >= 1 ? 2 : 3;
    return v.toLocaleString("en-US", { maximumFractionDigits: digits });
  }

  function tick(v) {
    return String(+v.toPrecision(6));
  }

  function esc(text) {
    const entities = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" };
    return String(text).replace(/[&<>"]/g, (c) => entities[c]);
  }

  // ---- SVG drawing -----------------------------------------------------------

  const COLORS = {
    sinceStart: "#4c78a8", lastMinute: "#f58518", p50: "#4c78a8", p99: "#e45756",
    target: "#54585f", cap: "#8e5cb5", observation: "#f58518", active: "#4c78a8", queued: "#e45756",
  };

  function frame(svg) {
    const box = svg.getBoundingClientRect();
    const f = { w: Math.max(240, Math.round(box.width)), h: Math.max(120, Math.round(box.height)) };
    Object.assign(f, { left: 58, right: 14, top: 24, bottom: 34 });
    f.pw = f.w - f.left - f.right;
    f.ph = f.h - f.top - f.bottom;
    svg.setAttribute("viewBox", `0 0 ${f.w} ${f.h}`);
    return f;
  }

  /** Round ticks from 0 to at least `max`; `integral` keeps steps whole (for counts). */
  function niceTicks(max, integral) {
    const raw = (max > 0 ? max : 1) / 4;
    const magnitude = 10 ** Math.floor(Math.log10(raw));
    let step = [1, 2, 2.5, 5, 10].map((k) => k * magnitude).find((s) => s >= raw);
    if (integral) step = Math.max(1, Math.round(step));
    const top = Math.max(step, Math.ceil((max - 1e-9) / step) * step);
    const ticks = [];
    for (let i = 0; i * step <= top + step / 2; i += 1) ticks.push(i * step);
    return { top, ticks };
  }

  function yAxis(f, scale, yLabel) {
    let out = "";
    for (const v of scale.ticks) {
      const y = f.top + f.ph - (v / scale.top) * f.ph;
      out += `<line class="grid-line" x1="${f.left}" x2="${f.left + f.pw}" y1="${y}" y2="${y}"/>`;
      out += `<text x="${f.left - 6}" y="${y + 4}" text-anchor="end">${tick(v)}</text>`;
    }
    const midY = f.top + f.ph / 2;
    out += `<text x="14" y="${midY}" text-anchor="middle" transform="rotate(-90 14 ${midY})">${esc(yLabel)}</text>`;
    out += `<line class="axis" x1="${f.left}" x2="${f.left}" y1="${f.top}" y2="${f.top + f.ph}"/>`;
    out += `<line class="axis" x1="${f.left}" x2="${f.left + f.pw}" y1="${f.top + f.ph}" y2="${f.top + f.ph}"/>`;
    return out;
  }

  function xLabel(f, text) {
    return `<text x="${f.left + f.pw / 2}" y="${f.h - 3}" text-anchor="middle">${esc(text)}</text>`;
  }

  function emptyNote(f, text) {
    return `<text class="empty" x="${f.left + f.pw / 2}" y="${f.top + f.ph / 2}" text-anchor="middle">${esc(text)}</text>`;
  }

  function legend(f, items) {
    let out = "";
    let x = f.left;
    for (const item of items) {
      const dash = item.dash ? ' stroke-dasharray="5 3"' : "";
      out += `<line x1="${x}" x2="${x + 16}" y1="10" y2="10" stroke="${item.color}" stroke-width="2.5"${dash}/>`;
      const label = `${item.name}: ${item.value}`;
      out += `<text class="legend" x="${x + 21}" y="14">${esc(label)}</text>`;
      x += 34 + label.length * 6.3;
    }
    return out;
  }

  /** Bars of bucket counts; `bounds` are the buckets' upper bounds, already in display units. */
  function drawBars(svg, counts, bounds, opts) {
    const f = frame(svg);
    const scale = niceTicks(Math.max(0, ...counts), true);
    const slot = f.pw / counts.length;
    const every = Math.ceil(36 / slot); // keep the x labels about 36 px apart
    let out = yAxis(f, scale, opts.yLabel);
    counts.forEach((count, i) => {
      const x = f.left + i * slot;
      const label = bounds[i] === Infinity ? "+Inf" : tick(bounds[i]);
      if (count > 0) {
        const h = (count / scale.top) * f.ph;
        const lower = i === 0 ? 0 : tick(bounds[i - 1]);
        const tip = `(${lower}, ${label}] ${opts.unit}: ${fmt(count)}`;
        out += `<rect x="${x + 1}" y="${f.top + f.ph - h}" width="${Math.max(1, slot - 2)}" height="${h}" fill="${opts.color}"><title>${esc(tip)}</title></rect>`;
      }
      if (i % every === 0) {
        out += `<text x="${x + slot / 2}" y="${f.top + f.ph + 14}" text-anchor="middle">${label}</text>`;
      }
    });
    out += xLabel(f, `bucket upper bound (${opts.unit})`);
    if (!counts.some((c) => c > 0)) out += emptyNote(f, "no observations yet");
    svg.innerHTML = out;
    svg.dataset.points = String(counts.filter((c) => c > 0).length);
  }

  /** Lines over the last HISTORY_S seconds; a series' `key` reads its value from each sample. */
  function drawLines(svg, series, opts) {
    const f = frame(svg);
    const now = samples.length ? samples[samples.length - 1].t : 0;
    // The time axis grows a minute at a time up to HISTORY_S, so a fresh page is not all empty.
    const span = Math.min(HISTORY_S, 60 * Math.max(1, Math.ceil((now - (samples.length ? samples[0].t : now)) / 60)));
    const x = (t) => f.left + f.pw * (1 - (now - t) / span);
    const values = series.flatMap((s) => samples.map((p) => p[s.key])).filter((v) => v !== null);
    const scale = niceTicks(Math.max(opts.minTop || 0, ...values), opts.integral);
    const y = (v) => f.top + f.ph - (v / scale.top) * f.ph;
    let out = yAxis(f, scale, opts.yLabel);
    const step = span <= 60 ? 10 : span <= 120 ? 20 : 60;
    for (let ago = span; ago >= 0; ago -= step) {
      const label = ago === 0 ? "now" : step < 60 ? `−${ago} s` : `−${ago / 60} min`;
      out += `<text x="${x(now - ago)}" y="${f.top + f.ph + 14}" text-anchor="middle">${label}</text>`;
    }
    for (const s of series) {
      let path = "";
      samples.forEach((p, i) => {
        const v = p[s.key];
        if (v === null) return;
        const previous = i > 0 ? samples[i - 1][s.key] : null;
        const next = i + 1 < samples.length ? samples[i + 1][s.key] : null;
        if (previous === null) {
          path += `M${x(p.t)},${y(v)}`;
          if (next === null) out += `<circle cx="${x(p.t)}" cy="${y(v)}" r="2.5" fill="${s.color}"/>`;
        } else {
          path += s.step ? `H${x(p.t)}V${y(v)}` : `L${x(p.t)},${y(v)}`;
        }
      });
      const dash = s.dash ? ' stroke-dasharray="5 3"' : "";
      out += `<path d="${path}" fill="none" stroke="${s.color}" stroke-width="2"${dash}/>`;
    }
    const last = samples[samples.length - 1] || {};
    out += legend(f, series.map((s) => ({ ...s, value: fmt(last[s.key]) })));
    out += xLabel(f, "time");
    const drawn = samples.filter((p) => series.some((s) => p[s.key] !== null && p[s.key] !== 0));
    if (!drawn.length) out += emptyNote(f, opts.empty || "no data yet");
    svg.innerHTML = out;
    svg.dataset.points = String(drawn.length);
    return drawn.length;
  }

  // ---- the page --------------------------------------------------------------

  const byId = (id) => document.getElementById(id);

  function histogramTitle(h, scaleUnit, unitName, what) {
    const n = total(h);
    if (!(n > 0)) return `${what} · no observations`;
    const p50 = quantile(0.5, h) * scaleUnit;
    const p99 = quantile(0.99, h) * scaleUnit;
    return `${what} · ${fmt(n)} observations · P50 ${fmt(p50)} ${unitName} · P99 ${fmt(p99)} ${unitName}`;
  }

  function drawHistograms(prefix, sinceStart, lastMinute, opts) {
    const minuteWhat = view.minuteAgeS >= MINUTE_S - 1 ? "last minute" : `last ${Math.round(view.minuteAgeS)} s (since this page opened)`;
    byId(`${prefix}-hist-title`).textContent = histogramTitle(sinceStart, opts.scale, opts.unit, "since start");
    byId(`${prefix}-hist-minute-title`).textContent = histogramTitle(lastMinute, opts.scale, opts.unit, minuteWhat);
    if (!sinceStart) return;
    // Both views share the x axis of the since-start one, cut after its last busy bucket.
    const all = bucketCounts(sinceStart);
    const lastBusy = all.reduce((last, c, i) => (c > 0 ? i : last), -1);
    const end = Math.min(all.length, Math.max(lastBusy + 2, MIN_BARS));
    const bounds = sinceStart.le.slice(0, end).map((le) => (le === Infinity ? le : le * opts.scale));
    const common = { unit: opts.unit, yLabel: opts.yLabel };
    drawBars(byId(`${prefix}-hist`), all.slice(0, end), bounds, { ...common, color: COLORS.sinceStart });
    const minute = lastMinute ? bucketCounts(lastMinute).slice(0, end) : bounds.map(() => 0);
    drawBars(byId(`${prefix}-hist-minute`), minute, bounds, { ...common, color: COLORS.lastMinute });
  }

  function drawTiles() {
    const { snap, outcomes } = view;
    const notOk = Object.entries(outcomes).filter(([k]) => k !== "ok").reduce((a, [, v]) => a + v, 0);
    const last = samples[samples.length - 1];
    byId("tile-ok").textContent = fmt(snap.ok);
    byId("tile-ok-rate").textContent = `${fmt(view.okPerS)} req/s over ${WINDOW_S} s`;
    byId("tile-errors").textContent = fmt(notOk);
    const parts = [["client_error", "4xx"], ["server_error", "5xx"], ["shed", "shed"], ["aborted", "aborted"], ["client_stalled", "stalled"]];
    const shedBy = Object.entries(view.rejections).filter(([, v]) => v > 0).map(([k, v]) => `${k} ${fmt(v)}`);
    byId("tile-errors-detail").textContent = parts.map(([k, name]) => `${name} ${fmt(outcomes[k] || 0)}`).join(" · ") +
      (shedBy.length ? ` (shed: ${shedBy.join(", ")})` : "");
    // Since start, by where the objectives came from (request, tenant or gateway).
    const sources = Object.entries(view.goodput).filter(([, g]) => g.all > 0);
    const met = sources.reduce((a, [, g]) => a + g.met, 0);
    const all = sources.reduce((a, [, g]) => a + g.all, 0);
    byId("tile-goodput").textContent = all ? `${fmt((100 * met) / all)}%` : "–";
    byId("tile-goodput-detail").textContent = sources
      .map(([name, g]) => `${name} ${fmt(g.met)}/${fmt(g.all)}`).join(" · ");
    byId("tile-tokens").textContent = fmt(snap.tokens);
    byId("tile-tokens-rate").textContent = `${fmt(view.tokensPerS)} tokens/s over ${WINDOW_S} s`;
    byId("tile-load").textContent = `${fmt(last.active)} / ${fmt(last.queued)}`;
    byId("tile-cap").textContent = last.cap === null ? "none" : fmt(last.cap);
    byId("tile-deadline").textContent = last.margin ? `×${fmt(last.margin)}` : "off";
    byId("tile-deadline-detail").textContent =
      `${fmt(last.deadlineMisses)} late / ${fmt(last.deadlineSteps)} planned to a deadline · ` +
      `${fmt(last.zeroPrefillSteps)} with no prefill`;
    byId("tile-iteration").textContent = `${fmt(last.observation)} / ${fmt(last.target)}`;
    drawTenants(view.tenants);
  }

  function drawTenants(rows) {
    const shown = rows.slice(0, MAX_TENANT_ROWS);
    const table = byId("tile-tenants");
    table.tBodies[0].innerHTML = shown.map((r) =>
      `<tr data-tenant="${esc(r.name)}"><td title="${esc(r.name)}">${esc(r.name)}</td><td>${fmt(r.slots)}</td>` +
      `<td>${fmt(r.tokensPerS)}</td><td>${fmt(r.ok)} / ${fmt(r.shed)}</td></tr>`).join("");
    table.dataset.rows = String(shown.length);
    const more = rows.length - shown.length;
    byId("tile-tenants-detail").textContent = !rows.length ? "no tenant series in /metrics"
      : `slots now; tokens/s and requests over ${WINDOW_S} s` + (more > 0 ? ` · ${more} more tenants` : "");
  }

  function draw() {
    if (!view) return;
    drawTiles();
    drawHistograms("itl", view.snap.itl, view.itlMinute, { scale: 1000, unit: "ms", yLabel: "tokens" });
    drawHistograms("ttft", view.snap.ttft, view.ttftMinute, { scale: 1, unit: "s", yLabel: "requests" });
    const quantiles =
      drawLines(byId("itl-quantiles"), [
        { key: "itl50", name: "ITL P50", color: COLORS.p50 },
        { key: "itl99", name: "ITL P99", color: COLORS.p99 },
        { key: "target", name: "iteration target", color: COLORS.target, dash: true, step: true },
      ], { yLabel: "ms", empty: "no tokens streamed in the window" }) +
      drawLines(byId("ttft-quantiles"), [
        { key: "ttft50", name: "TTFT P50", color: COLORS.p50 },
        { key: "ttft99", name: "TTFT P99", color: COLORS.p99 },
      ], { yLabel: "seconds", empty: "no first tokens in the window" });
    byId("quantiles").dataset.points = String(quantiles);
    const controller =
      drawLines(byId("controller-cap"), [
        { key: "cap", name: "prefill cap", color: COLORS.cap, step: true },
      ], { yLabel: "tokens", integral: true, minTop: 1 }) +
      drawLines(byId("controller-latency"), [
        { key: "observation", name: "observed", color: COLORS.observation },
        { key: "target", name: "target", color: COLORS.target, dash: true, step: true },
      ], { yLabel: "ms", empty: "no mixed iteration observed yet" });
    byId("controller").dataset.points = String(controller);
    drawLines(byId("requests"), [
      { key: "active", name: "active", color: COLORS.active, step: true },
      { key: "queued", name: "queued", color: COLORS.queued, step: true },
    ], { yLabel: "requests", integral: true, minTop: 1, empty: "idle" });
  }

  function setStatus(isLive, text) {
    const status = byId("status");
    status.textContent = text;
    status.className = `status ${isLive ? "live" : "down"}`;
    document.body.dataset.connected = String(isLive);
  }

  // ---- the metrics token ------------------------------------------------------

  const TOKEN_KEY = "dlfp-metrics-token";

  function storedToken() {
    try {
      return sessionStorage.getItem(TOKEN_KEY) || "";
    } catch (err) {
      return ""; // storage disabled: the token lasts until the page reloads
    }
  }

  let token = storedToken();

  function useToken() {
    token = byId("token-input").value.trim();
    try {
      sessionStorage.setItem(TOKEN_KEY, token);
    } catch (err) {
      // storage disabled: keep it in memory only
    }
    byId("token").hidden = true;
    retryMs = REFRESH_MS;
    clearTimeout(nextRefresh);
    refresh();
  }

  function askForToken() {
    byId("token").hidden = false;
    setStatus(false, token ? "the metrics token was refused" : "/metrics needs its token");
  }

  byId("token-use").addEventListener("click", useToken);
  byId("token-input").addEventListener("keydown", (event) => {
    if (event.key === "Enter") useToken();
  });

  class Unauthorized extends Error {}

  async function fetchMetrics() {
    const abort = new AbortController();
    const timer = setTimeout(() => abort.abort(), FETCH_TIMEOUT_MS);
    const headers = token ? { Authorization: `Bearer ${token}` } : {};
    try {
      // Relative: resolves to this gateway's /metrics, also behind a path prefix.
      const response = await fetch("metrics", { cache: "no-store", signal: abort.signal, headers });
      if (response.status === 401) throw new Unauthorized();
      if (!response.ok) throw new Error(`HTTP ${response.status}`);
      return await response.text();
    } finally {
      clearTimeout(timer);
    }
  }

  let retryMs = REFRESH_MS;
  let nextRefresh = null;

  async function refresh() {
    let text = null;
    try {
      text = await fetchMetrics();
      retryMs = REFRESH_MS;
    } catch (err) {
      if (err instanceof Unauthorized) {
        askForToken(); // no retry: the next one waits for a token
        return;
      }
      // Back off while the gateway is away: each failed fetch costs a browser log line.
      retryMs = Math.min(MAX_RETRY_MS, retryMs * 2);
      const reason = err && err.name === "AbortError" ? "timed out" : (err && err.message) || "no answer";
      setStatus(false, `disconnected (${reason}) · retrying in ${Math.round(retryMs / 1000)} s`);
    }
    nextRefresh = setTimeout(refresh, retryMs);
    // NOTE: outside the try on purpose: a drawing bug must surface as an error, not as "disconnected".
    if (text === null) return;
    update(text);
    draw();
    numUpdates += 1;
    document.body.dataset.updates = String(numUpdates);
    setStatus(true, `live · updated ${new Date().toLocaleTimeString("en-GB")}`);
  }

  window.addEventListener("resize", draw);
  refresh();
})();
