// Mnemo console: vanilla JavaScript, no build step, no dependency.
// Every number it shows comes from the documented /v1/insights endpoints, called like any
// other client: the API key as a bearer token (its tenant is whose data this is). The key is
// typed into the page, or handed over in the URL's fragment (#key=…, never sent to the
// server and removed from the address bar at once); it is kept in sessionStorage only.
"use strict";

(() => {
  const $ = (sel) => document.querySelector(sel);
  const HEAT_ORDER = { hot: 0, warm: 1, cool: 2, neutral: 3 };
  const MAX_EVENT_ROWS = 300;
  const TAIL_MS = 2000;

  const state = {
    key: "",
    tenant: "",
    principal: "",
    subject: "",
    cells: [],
    selectedMemory: null,
    selectedContext: null,
    tailNext: null,
    tailTimer: null,
    tailBusy: false,
    loaded: {},
  };

  // ---- small helpers ------------------------------------------------------------------------

  /** An element with attributes, properties and children; text is never parsed as HTML. */
  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") el.className = v;
      else if (k === "text") el.textContent = v;
      else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
      else if (k === "dataset") Object.assign(el.dataset, v);
      else el.setAttribute(k, v === true ? "" : String(v));
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined || child === false) continue;
      el.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return el;
  }

  function clear(el) {
    while (el.firstChild) el.removeChild(el.firstChild);
    return el;
  }

  function when(iso) {
    if (!iso) return "";
    const d = new Date(iso);
    if (Number.isNaN(d.getTime())) return String(iso);
    return d.toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
  }

  function short(id) {
    return id ? String(id).slice(-12) : "";
  }

  function pct(x) {
    return `${Math.round((Number(x) || 0) * 100)}%`;
  }

  function setStatus(text, isError) {
    const el = $("#status");
    el.textContent = text;
    el.classList.toggle("error", Boolean(isError));
  }

  async function api(path, params) {
    const url = new URL(path, window.location.origin);
    for (const [k, v] of Object.entries(params || {})) {
      if (v === null || v === undefined || v === "") continue;
      if (Array.isArray(v)) v.forEach((x) => url.searchParams.append(k, x));
      else url.searchParams.set(k, String(v));
    }
    const headers = { Accept: "application/json", Authorization: `Bearer ${state.key}` };
    if (state.principal) headers["X-Mnemo-Principal"] = state.principal;
    const response = await fetch(url, { headers, cache: "no-store" });
    const body = await response.json().catch(() => null);
    if (!response.ok) {
      const err = (body && body.error) || {};
      throw new Error(`${err.code || response.status}: ${err.message || response.statusText}`);
    }
    return body;
  }

  function failed(err) {
    setStatus(String(err.message || err), true);
  }

  // ---- identity and tabs ------------------------------------------------------------------------

  function readIdentity() {
    const params = new URLSearchParams(window.location.search);
    const stored = (k) => {
      try {
        return window.localStorage.getItem(`mnemo.console.${k}`) || "";
      } catch (_) {
        return "";
      }
    };
    const fragment = new URLSearchParams(window.location.hash.replace(/^#/, ""));
    state.key = fragment.get("key") || sessionKey();
    if (fragment.has("key")) {
      fragment.delete("key");
      const rest = fragment.toString();
      const url = `${window.location.pathname}${window.location.search}${rest ? `#${rest}` : ""}`;
      window.history.replaceState(null, "", url);
      keepKey(state.key);
    }
    state.principal = params.get("principal") || stored("principal") || "console";
    state.subject = params.get("subject") || "";
    $("#key").value = state.key;
    $("#principal").value = state.principal;
    $("#subject").value = state.subject;
  }

  function sessionKey() {
    try {
      return window.sessionStorage.getItem("mnemo.console.key") || "";
    } catch (_) {
      return "";
    }
  }

  function keepKey(key) {
    try {
      window.sessionStorage.setItem("mnemo.console.key", key);
    } catch (_) {
      /* storage may be off: the key then lives as long as the page */
    }
  }

  function writeIdentity() {
    keepKey(state.key);
    const params = new URLSearchParams(window.location.search);
    params.delete("tenant");
    for (const k of ["principal", "subject"]) {
      if (state[k]) params.set(k, state[k]);
      else params.delete(k);
      try {
        if (k !== "subject") window.localStorage.setItem(`mnemo.console.${k}`, state[k]);
      } catch (_) {
        /* storage may be off: the URL keeps the identity anyway */
      }
    }
    const url = `${window.location.pathname}?${params}${window.location.hash}`;
    window.history.replaceState(null, "", url);
  }

  function currentTab() {
    const selected = document.querySelector('.tabs [aria-selected="true"]');
    return selected ? selected.dataset.tab : "heat";
  }

  function showTab(name) {
    for (const button of document.querySelectorAll(".tabs [data-tab]")) {
      button.setAttribute("aria-selected", String(button.dataset.tab === name));
    }
    for (const panel of document.querySelectorAll(".tab")) {
      panel.hidden = panel.id !== `tab-${name}`;
    }
    if (!state.key || !state.tenant) return;
    if (name === "contexts" && !state.loaded.contexts) loadContexts().catch(failed);
    if (name === "health" && !state.loaded.health) loadHealth().catch(failed);
    if (name === "events") startTail();
    else stopTail();
  }

  // ---- (1) heat map ---------------------------------------------------------------------------

  function cellSize(weight) {
    // 20 px for a weightless memory up to 48 px for the heaviest: area grows with weight
    return Math.round(20 + 28 * Math.max(0, Math.min(1, Number(weight) || 0)));
  }

  function cellTitle(c) {
    const what = c.key ? `${c.key}: ${c.label}` : c.label;
    return [
      `${c.type} · ${c.scope} · ${c.status} · ${c.stream}`,
      what || "(content erased)",
      `weight ${c.weight.toFixed(2)} · freshness ${pct(c.freshness)}${c.stale ? " (stale)" : ""} · trust ${c.trust.toFixed(2)}${c.verified ? " (verified)" : ""}`,
      `cited ${c.cited} · truncated ${c.truncated} · included ${c.included} · ${c.heat}`,
    ].join("\n");
  }

  function describe(c) {
    const card = clear($("#hover"));
    card.append(
      h("div", {},
        h("span", { class: `badge heat-${c.heat}`, text: c.heat }), " ",
        h("strong", { text: c.key ? `${c.key}: ${c.label}` : c.label || "(content erased)" })),
      h("div", {
        text: `${c.type} · ${c.scope} · ${c.status} · ${c.stream} · v${c.version}`,
      }),
      h("div", {
        text: `weight ${c.weight.toFixed(2)} · freshness ${pct(c.freshness)}${c.stale ? " (stale)" : ""} · trust ${c.trust.toFixed(2)}${c.verified ? " (verified)" : ""}`,
      }),
      h("div", {
        text: `cited ${c.cited} (${pct(c.cited_rate)} of inclusions) · truncated ${c.truncated} (${pct(c.truncated_rate)} of appearances) · included ${c.included} · corrected ${c.corrected}`,
      }),
    );
  }

  function sortedCells() {
    const order = $("#order").value;
    const cells = state.cells.slice();
    if (order === "heat") {
      cells.sort((a, b) => HEAT_ORDER[a.heat] - HEAT_ORDER[b.heat] || b.weight - a.weight ||
        (a.memory_id < b.memory_id ? -1 : 1));
    } else if (order === "weight") {
      cells.sort((a, b) => b.weight - a.weight || (a.memory_id < b.memory_id ? -1 : 1));
    }
    return cells;
  }

  function drawCells() {
    const map = clear($("#heatmap"));
    for (const c of sortedCells()) {
      const size = cellSize(c.weight);
      const cell = h("button", {
        type: "button",
        role: "listitem",
        class: `cell heat-${c.heat}${c.status !== "active" ? " inactive" : ""}${c.memory_id === state.selectedMemory ? " selected" : ""}`,
        title: cellTitle(c),
        "aria-label": `${c.heat}: ${c.type} ${c.key || c.label}`,
        dataset: { memoryId: c.memory_id, heat: c.heat },
        onmouseenter: () => describe(c),
        onfocus: () => describe(c),
        onclick: () => openMemory(c.memory_id).catch(failed),
      });
      cell.style.width = `${size}px`;
      cell.style.height = `${size}px`;
      map.append(cell);
    }
    $("#heat-empty").hidden = state.cells.length > 0;
  }

  async function loadHeatmap() {
    const data = await api("/v1/insights/heatmap", {
      subject: state.subject,
      include_inactive: $("#inactive").checked ? "true" : "",
      limit: 2000,
    });
    state.cells = data.cells;
    const legend = clear($("#legend"));
    for (const item of data.legend) {
      legend.append(
        h("li", { title: item.meaning },
          h("span", { class: `swatch heat-${item.heat}` }),
          `${item.heat} (${data.totals[item.heat] || 0})`,
          h("span", { class: "meta", text: ` ${item.meaning}` })),
      );
    }
    const r = data.rule;
    $("#heat-rule").textContent =
      `Cited often: ≥ ${r.min_cited} citations and ≥ ${pct(r.cited_share)} of inclusions. ` +
      `Cut often: ≥ ${r.min_truncated} truncations and ≥ ${pct(r.truncated_share)} of appearances. ` +
      "Size follows the memory's weight; dashed cells are no longer active.";
    drawCells();
    if (!state.subject) {
      const subjects = clear($("#subjects"));
      for (const s of [...new Set(data.cells.map((c) => c.stream))].sort()) {
        subjects.append(h("option", { value: s }));
      }
    }
    const scope = state.subject ? `subject ${state.subject}` : "the whole tenant";
    setStatus(`${data.cells.length} memories of ${scope} (tenant ${state.tenant})`);
  }

  // ---- (2) a memory's life ----------------------------------------------------------------------

  async function openMemory(memoryId) {
    const data = await api(`/v1/insights/memories/${encodeURIComponent(memoryId)}/life`);
    state.selectedMemory = memoryId;
    for (const el of document.querySelectorAll(".cell")) {
      el.classList.toggle("selected", el.dataset.memoryId === memoryId);
    }
    const m = data.memory;
    const c = data.cell;
    const box = clear($("#life-memory"));
    box.append(
      h("p", { class: "memory-text" },
        h("span", { class: `badge heat-${c.heat}`, text: c.heat }), " ",
        m.key ? h("strong", { text: `${m.key}: ` }) : null,
        m.key && !m.content ? (m.value || "") : (m.content || "(content erased)")),
      h("dl", { class: "facts" },
        h("dt", { text: "id" }), h("dd", {}, h("code", { text: m.memory_id })),
        h("dt", { text: "type · scope" }), h("dd", { text: `${m.type} · ${m.scope}` }),
        h("dt", { text: "status" }), h("dd", { text: `${m.status} (version ${m.version})` }),
        h("dt", { text: "subject" }), h("dd", { text: m.stream }),
        h("dt", { text: "weight" }), h("dd", { text: `${c.weight.toFixed(3)} now, ${m.semantic_weight.toFixed(3)} recorded` }),
        h("dt", { text: "freshness" }), h("dd", { text: `${pct(c.freshness)}${m.valid_until ? ` · valid until ${when(m.valid_until)}` : " · permanent"}${c.stale ? " · stale" : ""}` }),
        h("dt", { text: "trust" }), h("dd", { text: `${m.provenance.trust.toFixed(2)}${m.provenance.verified ? " · verified" : ""}${m.provenance.source_id ? ` · ${m.provenance.source_id}` : ""}` }),
        h("dt", { text: "usage" }), h("dd", { text: `included ${c.included} · truncated ${c.truncated} · cited ${c.cited} · corrected ${c.corrected}` }),
        h("dt", { text: "created" }), h("dd", { text: when(m.created_at) }),
        m.tags.length ? h("dt", { text: "tags" }) : null,
        m.tags.length ? h("dd", { text: m.tags.join(", ") }) : null),
    );

    const versions = clear($("#life-versions"));
    for (const v of data.versions) {
      const text = v.key && !v.content ? `${v.key}: ${v.value || "(erased)"}` : v.content || "(erased)";
      versions.append(
        h("li", { class: v.memory_id === m.memory_id ? "current" : "" },
          v.memory_id === m.memory_id
            ? `v${v.version} · ${v.status} · ${text}`
            : h("button", {
              type: "button",
              class: "linkish",
              text: `v${v.version} · ${v.status} · ${text}`,
              onclick: () => openMemory(v.memory_id).catch(failed),
            })),
      );
    }

    const body = clear($("#life-timeline tbody"));
    for (const e of data.timeline) {
      body.append(
        h("tr", {},
          h("td", { class: "num", text: e.offset }),
          h("td", { class: "when", text: when(e.occurred_at) }),
          h("td", {}, h("span", { class: `what what-${e.what}`, text: e.what })),
          h("td", { text: e.event_type }),
          h("td", { class: "mono", text: e.detail })),
      );
    }
    if (!data.timeline.length) body.append(h("tr", {}, h("td", { colspan: 5, class: "empty", text: "No event yet." })));

    const contexts = clear($("#life-contexts"));
    for (const use of data.contexts) {
      contexts.append(h("li", {}, contextButton(use.context, use.role)));
    }
    if (!data.contexts.length) contexts.append(h("li", { class: "empty", text: "In no context yet." }));

    const panel = $("#life");
    panel.hidden = false;
    panel.scrollIntoView({ block: "nearest" });
  }

  // ---- (3) contexts -----------------------------------------------------------------------------

  function contextButton(ctx, role) {
    return h("button", {
      type: "button",
      class: ctx.request_id === state.selectedContext ? "selected" : "",
      dataset: { requestId: ctx.request_id },
      onclick: () => openContext(ctx.request_id).catch(failed),
    },
    role ? h("span", { class: `badge ${role === "truncated" ? "bad" : "ok"}`, text: role }) : null,
    h("code", { text: short(ctx.request_id) }),
    h("span", { text: `${ctx.template} · ${ctx.stream}` }),
    h("span", {
      class: "meta",
      text: `${when(ctx.occurred_at)} · ${ctx.tokens}/${ctx.budget} tokens · ${ctx.included} in · ${ctx.truncated} cut · ${ctx.left_out} other${ctx.answered ? " · answered" : ""}`,
    }));
  }

  async function loadContexts() {
    const data = await api("/v1/insights/contexts", { limit: 100 });
    state.loaded.contexts = true;
    const list = clear($("#contexts"));
    for (const ctx of data.contexts) list.append(h("li", {}, contextButton(ctx)));
    $("#contexts-empty").hidden = data.contexts.length > 0;
  }

  function placedItem(p) {
    return h("li", { dataset: { memoryId: p.memory_id } },
      p.reason ? h("span", { class: `reason reason-${p.reason}`, text: p.reason }) : null,
      p.section ? h("span", { class: "badge", text: p.section }) : null,
      p.type ? h("span", { class: "meta", text: p.type }) : null,
      h("button", {
        type: "button",
        class: "linkish",
        text: p.label || short(p.memory_id),
        title: p.memory_id,
        onclick: () => {
          showTab("heat");
          openMemory(p.memory_id).catch(failed);
        },
      }));
  }

  async function openContext(requestId) {
    const data = await api(`/v1/insights/contexts/${encodeURIComponent(requestId)}`);
    state.selectedContext = requestId;
    if (currentTab() !== "contexts") showTab("contexts");
    for (const el of document.querySelectorAll("#contexts button")) {
      el.classList.toggle("selected", el.dataset.requestId === requestId);
    }
    const s = data.summary;
    $("#inspector-id").textContent = short(s.request_id);
    $("#inspector-id").title = s.request_id;
    $("#inspector-summary").textContent =
      `${s.template} · ${s.stream} · ${when(s.occurred_at)} · ${s.tokens} of ${s.budget} tokens · ` +
      `${s.included} included, ${s.truncated} cut for the budget, ${s.left_out} left out otherwise` +
      (data.response_hash ? " · answer reported" : "");
    $("#inspector-rendered").textContent = data.rendered || "(not kept)";
    const left = clear($("#inspector-leftout"));
    for (const p of data.left_out) left.append(placedItem(p));
    if (!data.left_out.length) left.append(h("li", { class: "empty", text: "Nothing was left out." }));
    const inc = clear($("#inspector-included"));
    for (const p of data.included) inc.append(placedItem(p));
    if (!data.included.length) inc.append(h("li", { class: "empty", text: "Nothing was rendered." }));
    const panel = $("#inspector");
    panel.hidden = false;
    panel.scrollIntoView({ block: "nearest" });
  }

  // ---- (4) live tail ------------------------------------------------------------------------------

  function summary(e) {
    const p = e.payload || {};
    const clip = (text, n) => String(text || "").slice(0, n);
    switch (e.type) {
      case "ContextAssembled":
        return `${(p.memory_ids || []).length} in, ${(p.truncated || []).length} cut · ${p.template || ""} · ${p.rendered_tokens || 0}/${p.budget || 0} tokens`;
      case "ContextResponseReported":
        return `answer to ${short(p.request_id)} · ${(p.cited || []).length} cited${(p.violations || []).length ? ` · broke ${p.violations.join(", ")}` : ""}`;
      case "MemoryCited":
        return `${short(p.memory_id)} cited at the ${p.position || "?"} of ${short(p.request_id)}`;
      case "MemoryCorrected":
        return `${(p.memory_ids || []).map(short).join(", ")}: ${clip(p.reason, 80)}`;
      case "MemoryDecayed":
        return `${short(p.memory_id)} → weight ${p.semantic_weight}, trust ${p.trust} (${clip(p.reason, 60)})`;
      case "MemoryRejected":
        return `${p.reason_code}: ${clip(p.detail, 80)}`;
      case "MemorySuperseded":
        return `${short(p.memory_id)} → ${short(p.superseded_by)} (${p.key || ""})`;
      case "TemplateRegistered":
        return p.template ? `${p.template.name}@${p.template.version}` : "";
      default:
        break;
    }
    if (p.memory && typeof p.memory === "object") {
      const m = p.memory;
      return `${m.type || ""} ${m.key ? `${m.key}=${m.value}` : clip(m.content, 80)}`;
    }
    if (p.text) return clip(p.text, 80);
    if (p.memory_id) return `${short(p.memory_id)} ${p.reason || ""}`;
    return "";
  }

  function tailFilters() {
    const type = $("#f-type").value.trim();
    return {
      type: type ? type.split(/[\s,]+/).filter(Boolean) : [],
      stream: $("#f-stream").value.trim(),
      actor: $("#f-actor").value.trim(),
    };
  }

  async function tailOnce() {
    if (state.tailBusy || !state.key || !state.tenant) return;
    state.tailBusy = true;
    try {
      const first = state.tailNext === null;
      const params = { ...tailFilters(), limit: first ? 100 : 500 };
      if (!first) params.after_offset = state.tailNext;
      const data = await api("/v1/insights/events", params);
      state.tailNext = data.next;
      const body = $("#events tbody");
      const rows = data.events.map((e) =>
        h("tr", { class: first ? "" : "fresh", dataset: { offset: e.offset } },
          h("td", { class: "num", text: e.offset }),
          h("td", { class: "when", text: when(e.occurred_at) }),
          h("td", { text: e.type }),
          h("td", { text: e.stream }),
          h("td", { text: e.actor }),
          h("td", { class: "mono", text: summary(e) })));
      // newest on top
      for (const row of rows) body.insertBefore(row, body.firstChild);
      while (body.children.length > MAX_EVENT_ROWS) body.removeChild(body.lastChild);
      $("#events-empty").hidden = body.children.length > 0;
    } finally {
      state.tailBusy = false;
    }
  }

  function startTail() {
    stopTail();
    tailOnce().catch(failed);
    if ($("#live").checked) {
      state.tailTimer = window.setInterval(() => tailOnce().catch(failed), TAIL_MS);
    }
  }

  function stopTail() {
    if (state.tailTimer !== null) window.clearInterval(state.tailTimer);
    state.tailTimer = null;
  }

  function resetTail() {
    state.tailNext = null;
    clear($("#events tbody"));
    if (currentTab() === "events") startTail();
  }

  // ---- audit, rejections, dead letters --------------------------------------------------------------

  async function loadAudit() {
    const a = await api("/v1/insights/audit");
    const box = clear($("#audit"));
    const label = { intact: "Chain intact", broken: "Chain broken", empty: "No link yet" }[a.status] || a.status;
    box.append(
      h("p", { class: `state ${a.status}`, id: "audit-state", dataset: { status: a.status }, text: label }),
      h("dl", { class: "facts" },
        h("dt", { text: "links verified" }), h("dd", { text: a.links }),
        h("dt", { text: "stream chains" }), h("dd", { text: a.streams }),
        h("dt", { text: "not yet linked" }), h("dd", { text: a.pending }),
        a.stream ? h("dt", { text: "broken stream" }) : null,
        a.stream ? h("dd", { text: a.stream }) : null,
        a.first_broken !== null ? h("dt", { text: "first broken link" }) : null,
        a.first_broken !== null ? h("dd", { text: a.first_broken }) : null,
        a.reason ? h("dt", { text: "why" }) : null,
        a.reason ? h("dd", { text: a.reason }) : null,
        a.head_hash ? h("dt", { text: "heads digest" }) : null,
        a.head_hash ? h("dd", {}, h("code", { text: a.head_hash })) : null,
        h("dt", { text: "checked at" }), h("dd", { text: new Date().toISOString().replace(/\.\d+Z$/, "Z") })),
    );
  }

  async function loadHealth() {
    state.loaded.health = true;
    const [rejections, dead] = await Promise.all([
      api("/v1/insights/rejections", { limit: 200 }),
      api("/v1/insights/dead-letters"),
      loadAudit(),
    ]);
    const body = clear($("#rejections tbody"));
    for (const r of rejections.rejections) {
      body.append(
        h("tr", { dataset: { eventId: r.event_id } },
          h("td", { class: "num", text: r.offset }),
          h("td", { class: "when", text: when(r.occurred_at) }),
          h("td", { text: `${r.event_type} #${r.index}` }),
          h("td", { text: r.stream }),
          h("td", {}, h("span", { class: "reason", text: r.outcome === "ignored" ? `${r.reason_code} (not remembered)` : r.reason_code })),
          h("td", { text: r.detail || "" })),
      );
    }
    $("#rejections-empty").hidden = rejections.rejections.length > 0;
    const list = clear($("#dead-letters"));
    for (const d of dead) {
      list.append(h("li", { text: `${d.consumer} · offset ${d.offset} · ${d.reason}` }));
    }
    $("#dead-empty").hidden = dead.length > 0;
  }

  // ---- wiring -----------------------------------------------------------------------------------

  async function loadAll() {
    if (!state.key) {
      setStatus("Enter an API key (memory:read and audit:read) to start.");
      return;
    }
    state.tenant = "";
    const me = await api("/v1/whoami");
    state.tenant = me.tenant;
    state.loaded = {};
    state.tailNext = null;
    clear($("#events tbody"));
    $("#life").hidden = true;
    $("#inspector").hidden = true;
    setStatus("Loading…");
    await loadHeatmap();
    const tab = currentTab();
    if (tab !== "heat") showTab(tab);
  }

  function init() {
    readIdentity();
    $("#identity").addEventListener("submit", (ev) => {
      ev.preventDefault();
      state.key = $("#key").value.trim();
      state.principal = $("#principal").value.trim();
      state.subject = $("#subject").value.trim();
      writeIdentity();
      loadAll().catch(failed);
    });
    for (const button of document.querySelectorAll(".tabs [data-tab]")) {
      button.addEventListener("click", () => showTab(button.dataset.tab));
    }
    for (const button of document.querySelectorAll("[data-close]")) {
      button.addEventListener("click", () => {
        $(`#${button.dataset.close}`).hidden = true;
      });
    }
    $("#inactive").addEventListener("change", () => loadHeatmap().catch(failed));
    $("#order").addEventListener("change", drawCells);
    $("#contexts-reload").addEventListener("click", () => loadContexts().catch(failed));
    $("#audit-verify").addEventListener("click", () => loadAudit().catch(failed));
    $("#event-filters").addEventListener("submit", (ev) => {
      ev.preventDefault();
      resetTail();
    });
    $("#live").addEventListener("change", () => {
      if (currentTab() === "events") startTail();
    });
    document.addEventListener("visibilitychange", () => {
      if (document.hidden) stopTail();
      else if (currentTab() === "events") startTail();
    });
    loadAll()
      .then(() => {
        document.body.dataset.ready = "true";
      })
      .catch((err) => {
        failed(err);
        document.body.dataset.ready = "error";
      });
  }

  init();
})();
