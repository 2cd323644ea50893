// The page asks the server's JSON API and shows its answers; it computes
// nothing of its own but the formatting, which follows the command line's
// (alloc.FormatSize, fmtSeconds, fmtRate) digit for digit.
"use strict";

const $ = (sel) => document.querySelector(sel);

// fixed prints x with the given decimals as Go's
// strconv.FormatFloat(x, 'f', digits, 64) does: the exact binary value
// rounded to the nearest decimal, ties to even. toFixed(60) gives enough
// of the exact decimal expansion to decide (a double's expansion that
// matters here ends well before), and the rounding is done on its digits.
function fixed(x, digits) {
  if (!isFinite(x)) return String(x);
  const neg = x < 0 || Object.is(x, -0);
  const full = Math.abs(x).toFixed(60);
  const [ip, fp] = full.split(".");
  const keep = ip + fp.slice(0, digits);
  const rest = fp.slice(digits);
  let n = BigInt(keep);
  const half = "5" + "0".repeat(rest.length - 1);
  if (rest > half || (rest === half && n % 2n === 1n)) n += 1n;
  let t = n.toString().padStart(digits + 1, "0");
  if (digits > 0) t = t.slice(0, -digits) + "." + t.slice(-digits);
  return (neg ? "-" : "") + t;
}

function fmtBytes(n) {
  if (n < 0) return "-" + fmtBytes(-n);
  if (n <= 1024) return n + " bytes";
  if (n <= 1 << 20) return fixed(n / 1024, 2) + " KiB";
  if (n <= 1 << 30) return fixed(n / (1 << 20), 2) + " MiB";
  return fixed(n / (1 << 30), 2) + " GiB";
}

function fmtSeconds(s) {
  if (s >= 3600) return fixed(s / 3600, 1) + " h";
  if (s >= 60) return fixed(s / 60, 1) + " min";
  if (s >= 10) return fixed(s, 1) + " s";
  if (s >= 1) return fixed(s, 2) + " s";
  if (s >= 1e-3) return fixed(s * 1e3, 1) + " ms";
  return fixed(s * 1e6, 0) + " µs";
}

function commas(n) {
  return String(n).replace(/\B(?=(\d{3})+(?!\d))/g, ",");
}

function fmtRate(r) {
  if (r >= 100) return commas(Math.round(r));
  if (r >= 10) return fixed(r, 1);
  return fixed(r, 2);
}

// api posts body (an object of fields, or FormData) to path and returns
// the JSON answer, or throws the server's error message.
async function api(path, body, signal) {
  const init = { method: "POST", signal };
  if (body instanceof FormData) init.body = body;
  else {
    init.body = JSON.stringify(body);
    init.headers = { "Content-Type": "application/json" };
  }
  const res = await fetch(path, init);
  const type = res.headers.get("Content-Type") || "";
  if (!res.ok) {
    let msg = res.status + " " + res.statusText;
    if (type.startsWith("application/json")) msg = (await res.json()).error;
    throw new Error(msg);
  }
  return type.startsWith("image/svg+xml") ? res.text() : res.json();
}

// showSVG puts a chart the server drew into el, parsed as SVG (never as
// HTML).
function showSVG(el, text) {
  const doc = new DOMParser().parseFromString(text, "image/svg+xml");
  if (doc.querySelector("parsererror")) throw new Error("the chart could not be read");
  el.replaceChildren(document.importNode(doc.documentElement, true));
}

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  for (const c of children) e.append(c);
  return e;
}

// ---- the model: a zoo name, an uploaded file, or a directory's headers

let uploaded = null; // {kind: "file"|"dir", files: [{name, blob, size}], dir}

async function headerOf(file) {
  // A safetensors file's header is its first 8 + length bytes; the rest
  // (the weights) is never read or sent.
  const lenBuf = await file.slice(0, 8).arrayBuffer();
  if (lenBuf.byteLength < 8) return file;
  const n = new DataView(lenBuf).getBigUint64(0, true);
  if (n > 100n * 1024n * 1024n) return file.slice(0, 8);
  return file.slice(0, 8 + Number(n));
}

async function pickDir(files) {
  const keep = [];
  let dir = "";
  for (const f of files) {
    const rel = f.webkitRelativePath || f.name;
    const parts = rel.split("/");
    if (parts.length > 2) continue; // only the directory's own files
    if (!dir && parts.length === 2) dir = parts[0];
    if (f.name === "config.json" || f.name === "model.safetensors.index.json") keep.push({ name: f.name, blob: f, size: f.size });
    else if (f.name.endsWith(".safetensors")) keep.push({ name: f.name, blob: await headerOf(f), size: f.size });
  }
  if (!keep.some((f) => f.name === "config.json")) throw new Error("the directory has no config.json");
  return { kind: "dir", files: keep, dir };
}

function jobFields() {
  const f = {
    gpu: $("#gpu").value,
    batch: $("#batch").value,
    precision: $("#precision").value,
    optimizer: $("#optimizer").value,
    accumulate: $("#accumulate").value,
    checkpoint: $("#checkpoint").value,
  };
  if ($("#seq").value) f.seq = $("#seq").value;
  if ($("#alloc-conf").value) f["alloc-conf"] = $("#alloc-conf").value;
  if (Number($("#lora").value) > 0) {
    f.lora = $("#lora").value;
    f["lora-targets"] = $("#lora-targets").value;
  }
  if (Number($("#gpus").value) > 1) f.gpus = $("#gpus").value;
  if ($("#strategy").value) f.strategy = $("#strategy").value;
  if ($("#quant").value) {
    const [q, dq] = $("#quant").value.split("+");
    f.quant = q;
    if (dq) f["double-quant"] = "true";
    if ($("#quant-via").value !== "transformers") f["quant-via"] = $("#quant-via").value;
  }
  if (Number($("#lora").value) > 0 && $("#lora-impl").value !== "peft") f["lora-impl"] = $("#lora-impl").value;
  if ($("#cudnn-benchmark").checked) f["cudnn-benchmark"] = "true";
  if ($("#no-autocast-cache").checked) f["no-autocast-cache"] = "true";
  if ($("#channels-last").checked) f["memory-format"] = "channels_last";
  if ($("#loop-overhead").value.trim()) f["loop-overhead"] = $("#loop-overhead").value.trim();
  if ($("#no-sync").checked) f["no-sync"] = "true";
  if ($("#fsdp-wrap").value) f["fsdp-wrap"] = $("#fsdp-wrap").value;
  if ($("#fsdp-load").value !== "none") f["fsdp-load"] = $("#fsdp-load").value;
  if ($("#keep-output").checked) f["keep-output"] = "true";
  if (!uploaded) f.model = $("#model").value;
  return f;
}

// body turns fields into what api sends: JSON, or a multipart form with
// the upload.
function body(fields) {
  if (!uploaded) return fields;
  const fd = new FormData();
  for (const [k, v] of Object.entries(fields)) fd.append(k, v);
  if (uploaded.kind === "file") fd.append("model_file", uploaded.files[0].blob, uploaded.files[0].name);
  else {
    fd.append("dir", uploaded.dir);
    for (const f of uploaded.files) {
      fd.append("size:" + f.name, String(f.size));
      fd.append("model_dir", f.blob, f.name);
    }
  }
  return fd;
}

// ---- predictions

let seq = 0;
let inflight = null;

function setStatus(text, error) {
  const s = $("#status");
  s.textContent = text;
  s.classList.toggle("error", !!error);
}

function showEstimate(e) {
  for (const td of document.querySelectorAll("#results [data-field]")) {
    const v = e[td.dataset.field];
    td.dataset.bytes = String(v);
    td.textContent = fmtBytes(v);
  }
  for (const td of document.querySelectorAll("#results [data-count]")) {
    const n = e[td.dataset.count];
    td.dataset.value = String(n);
    td.textContent = `${commas(n)} of ${commas(e.param_count)}`;
  }
  const peak = $("#at-peak");
  peak.replaceChildren();
  for (const [cat, n] of Object.entries(e.at_peak_bytes)) {
    if (n > 0) peak.append(el("tr", {}, el("th", {}, cat.replaceAll("_", " ")), el("td", { "data-category": cat, "data-bytes": String(n) }, fmtBytes(n))));
  }
  const t = e.time;
  for (const td of document.querySelectorAll("#time [data-seconds]")) {
    td.textContent = t ? fmtSeconds(t[td.dataset.seconds]) : "—";
    td.dataset.value = t ? String(t[td.dataset.seconds]) : "";
  }
  for (const td of document.querySelectorAll("#time [data-rate]")) {
    const v = t ? t[td.dataset.rate] : undefined;
    td.textContent = v ? fmtRate(v) : "—";
    td.dataset.value = v ? String(v) : "";
  }
  const v = $("#verdict");
  v.className = "verdict " + (e.fits ? "fits" : "nofit");
  v.dataset.fits = String(e.fits);
  v.textContent = e.fits
    ? `fits: yes, ${fmtBytes(e.headroom_bytes)} of headroom — ${e.decided_by}`
    : `fits: no — ${e.decided_by}`;
  // the safety band, worded as estimate prints it
  const b = e.band;
  $("#band").textContent = b
    ? `band: batchfit's device total has been ${b.text}: the real one may reach ${fmtBytes(b.device_total_high_bytes)}, ${b.fits_with_band ? "fits even then" : "which would not fit"}`
    : "";
  // the prediction's caveats, the lines estimate prints as "note: …"
  const notes = $("#notes");
  notes.replaceChildren();
  for (const n of e.notes || []) notes.append(el("li", { "data-code": n.code }, "note: " + n.text));
  const s = $("#suggestions");
  s.replaceChildren();
  if (e.suggestions && e.suggestions.length) {
    s.append(el("p", {}, "The smallest changes that make it fit:"));
    const ol = el("ol", {});
    for (const p of e.suggestions) ol.append(planItem(p));
    s.append(ol);
    // the best plan on the job's own GPUs, when none of those shown is it
    const same = e.same_gpus_plan;
    if (same && !e.suggestions.some((p) => p.same_gpus)) {
      s.append(el("p", {}, "On the job's own GPUs:"));
      s.append(el("ul", {}, planItem(same)));
    }
  } else if (e.suggestions_error) s.append(el("p", {}, "No suggestions: " + e.suggestions_error));
  else if (e.larger_gpus && e.larger_gpus.length) {
    // named only where a plan simulated on that GPU fits it
    s.append(el("p", {}, "No change makes it fit on this GPU. A plan simulated on a larger GPU fits on:"));
    const ol = el("ol", {});
    for (const g of e.larger_gpus) {
      const what = g.plan.changes.length ? g.plan.changes.join("; ") : "the job as it is";
      ol.append(el("li", {}, `${g.gpu}: ${what} — device total ${fmtBytes(g.plan.device_total_bytes)} of ${fmtBytes(g.capacity_bytes)}`));
    }
    s.append(ol);
  } else if (e.larger_gpus_searched && e.larger_gpus_searched.length) {
    s.append(el("p", {}, `No change makes it fit on this GPU, and no plan simulated on a larger GPU fits (${e.larger_gpus_searched.join(", ")} searched).`));
  }
}

// planItem is one plan as the list shows it: its changes, device total,
// the GPUs it takes in all and its samples/s per GPU (how plans are
// ranked), and whether it keeps the job's GPU count.
function planItem(p) {
  const what = p.changes.length ? p.changes.join("; ") : "the job as it is";
  let text = `${what} — device total ${fmtBytes(p.device_total_bytes)}, ${p.gpus_total} GPU${p.gpus_total === 1 ? "" : "s"}`;
  if (p.samples_per_second_per_gpu) text += `, ${fmtRate(p.samples_per_second_per_gpu)} samples/s per GPU`;
  if (p.same_gpus) text += " (the best on the job's own GPUs)";
  return el("li", { "data-gpus-total": String(p.gpus_total), "data-per-gpu": String(p.samples_per_second_per_gpu || ""), "data-same-gpus": String(!!p.same_gpus) }, text);
}

async function update() {
  const id = ++seq;
  if (inflight) inflight.abort();
  inflight = new AbortController();
  const signal = inflight.signal;
  const results = $("#results");
  results.dataset.state = "loading";
  setStatus("computing…");
  const fields = jobFields();
  const sweepFields = Object.assign({}, fields, { batch: $("#sweep").value || "1:256" });
  try {
    const [est, sweepSVG, stepSVG] = await Promise.all([
      api("/api/estimate", body(fields), signal),
      api("/api/sweep.svg", body(sweepFields), signal),
      api("/api/estimate.svg", body(fields), signal),
    ]);
    if (id !== seq) return;
    showEstimate(est);
    showSVG($("#sweep-chart .svg"), sweepSVG);
    showSVG($("#timeline-chart .svg"), stepSVG);
    setStatus(`${est.model} · batch ${est.batch}${est.seq ? " · seq " + est.seq : ""} · ${est.precision} · ${est.optimizer} (${est.optimizer_impl}) · PyTorch ${est.torch_profile}+ rules · ${est.gpu}`);
    results.dataset.state = "ready";
    results.dataset.request = JSON.stringify(fields);
  } catch (err) {
    if (err.name === "AbortError" || id !== seq) return;
    setStatus(err.message, true);
    results.dataset.state = "error";
  }
}

let timer = null;
function schedule() {
  clearTimeout(timer);
  timer = setTimeout(update, 200);
}

// ---- out-of-memory messages

function dl(pairs) {
  const d = el("dl", {});
  for (const [k, v, attrs] of pairs) d.append(el("dt", {}, k), el("dd", attrs || {}, v));
  return d;
}

async function explainOOM(ev) {
  ev.preventDefault();
  const out = $("#oom-result");
  out.dataset.state = "loading";
  out.replaceChildren(el("p", { class: "status" }, "reading…"));
  try {
    const x = await api("/api/oom", { message: $("#oom-message").value });
    const bytes = (k) => [fmtBytes(x[k]), { "data-field": k, "data-bytes": String(x[k]) }];
    out.replaceChildren(
      el("p", { class: "verdict nofit", "data-cause": x.cause }, x.summary),
      dl([
        ["tried to allocate", ...bytes("requested_bytes")],
        ["free on the device", ...bytes("free_bytes")],
        ["reserved but unallocated", ...bytes("reserved_unallocated_bytes")],
        ["available in all", ...bytes("available_bytes")],
        ["short by", ...bytes("deficit_bytes")],
        ["outside PyTorch", ...bytes("outside_pytorch_bytes")],
      ]),
      el("p", {}, x.request_meaning),
    );
    if (x.findings && x.findings.length) {
      const ul = el("ul", { class: "findings" });
      for (const f of x.findings) ul.append(el("li", {}, f));
      out.append(ul);
    }
    if (x.steps && x.steps.length) {
      const ol = el("ol", { class: "steps" });
      for (const s of x.steps) ol.append(el("li", {}, s));
      out.append(el("p", {}, "What to do, most effective first:"), ol);
    }
    out.dataset.state = "ready";
  } catch (err) {
    out.replaceChildren(el("p", { class: "status error" }, err.message));
    out.dataset.state = "error";
  }
}

// ---- snapshots

async function replaySnapshot() {
  const file = $("#snapshot-file").files[0];
  if (!file) return;
  const out = $("#snapshot-result");
  out.dataset.state = "loading";
  out.replaceChildren(el("p", { class: "status" }, "replaying…"));
  const predict = $("#snapshot-predict").checked;
  const form = (withJob) => {
    const fd = new FormData();
    if (withJob) {
      // the job of the Predict form, as snapshot --model takes it; the
      // prediction uses the recording's allocator settings
      const f = jobFields();
      delete f["alloc-conf"];
      const b = body(f);
      for (const [k, v] of b instanceof FormData ? b.entries() : Object.entries(b)) fd.append(k, v);
    }
    fd.append("alloc-conf", $("#snapshot-what-if").value);
    fd.append("snapshot", file, file.name);
    return fd;
  };
  try {
    const [x, svg] = await Promise.all([api("/api/snapshot", form(predict)), api("/api/snapshot.svg", form(false))]);
    const bytes = (k) => [fmtBytes(x[k]), { "data-field": k, "data-bytes": String(x[k]) }];
    out.replaceChildren(
      el("p", {}, `${x.file}: ${commas(x.events)} events replayed with PYTORCH_CUDA_ALLOC_CONF="${x.alloc_conf}"`),
      dl([
        ["peak allocated", ...bytes("peak_allocated_bytes")],
        ["peak reserved", ...bytes("peak_reserved_bytes")],
        ["most reserved but unallocated", ...bytes("max_reserved_unallocated_bytes")],
        ["peak reserved with " + x.what_if_alloc_conf, ...bytes("what_if_peak_reserved_bytes")],
      ]),
    );
    if (x.top_sites && x.top_sites.length) {
      const ol = el("ol", { class: "sites" });
      for (const s of x.top_sites) ol.append(el("li", {}, `${fmtBytes(s.bytes)} ${s.site}`));
      out.append(el("p", {}, "Largest allocation sites at the peak:"), ol);
    }
    for (const w of x.warnings || []) out.append(el("p", { class: "note" }, "warning: " + w));
    const p = x.prediction;
    if (p) {
      // the comparison's phase table, as snapshot --model prints it
      const pct = (d, of) => (of ? ` (${d >= 0 ? "+" : "−"}${fixed(Math.abs((100 * d) / of), 1)} %)` : "");
      const diff = (d, of) => (d >= 0 ? "+" : "−") + fmtBytes(Math.abs(d)) + pct(d, of);
      const t = el("table", { id: "snapshot-prediction" }, el("caption", {}, "Beside the prediction: " + p.setup));
      t.append(el("tr", {}, ...["phase", "recorded allocated", "predicted", "difference", "recorded reserved", "predicted", "difference"].map((h) => el("th", {}, h))));
      for (const c of [Object.assign({}, p.overall, { phase: "all" }), ...p.phases]) {
        const cells = c.in_recording
          ? [fmtBytes(c.recorded_peak_allocated_bytes), fmtBytes(c.predicted_peak_allocated_bytes), diff(c.allocated_diff_bytes, c.recorded_peak_allocated_bytes),
             fmtBytes(c.recorded_peak_reserved_bytes), fmtBytes(c.predicted_peak_reserved_bytes), diff(c.reserved_diff_bytes, c.recorded_peak_reserved_bytes)]
          : ["not recorded", fmtBytes(c.predicted_peak_allocated_bytes), "", "not recorded", fmtBytes(c.predicted_peak_reserved_bytes), ""];
        t.append(el("tr", { "data-phase": c.phase, "data-diff": String(c.allocated_diff_bytes) }, el("th", {}, c.phase), ...cells.map((v) => el("td", {}, v))));
      }
      out.append(t, el("p", { class: "note" }, "the recording's phases: " + p.recording_phases_how));
      for (const n of p.notes || []) out.append(el("p", { class: "note" }, "note: " + n));
    }
    showSVG($("#snapshot-chart .svg"), svg);
    out.dataset.state = "ready";
  } catch (err) {
    out.replaceChildren(el("p", { class: "status error" }, err.message));
    out.dataset.state = "error";
  }
}

// ---- start

async function start() {
  const get = async (p) => (await fetch(p)).json();
  const [zoo, gpus, table] = await Promise.all([get("/api/models"), get("/api/gpus"), get("/api/fields")]);
  // The job's choices come from the one table the flags are made of
  // (/api/fields), each select starting at estimate's default.
  const fields = new Map(table.fields.map((f) => [f.name, f]));
  for (const sel of document.querySelectorAll("select[data-choices]")) {
    const f = fields.get(sel.name);
    if (!f) continue;
    for (const c of f.choices || []) sel.append(el("option", { value: c }, c));
    sel.value = (f.defaults && f.defaults.estimate) || f.default || "";
  }
  const model = $("#model");
  const families = new Map();
  for (const m of zoo) {
    if (!families.has(m.family)) families.set(m.family, el("optgroup", { label: m.family }));
    families.get(m.family).append(el("option", { value: m.name }, m.name));
  }
  model.append(...families.values());
  model.value = "resnet50";
  const gpu = $("#gpu");
  for (const g of gpus) gpu.append(el("option", { value: g.name }, `${g.name} (${fmtBytes(g.capacity_bytes)})`));
  gpu.value = "h100-80gb";

  $("#job-form").addEventListener("input", (ev) => {
    if (ev.target.type !== "file") schedule();
  });
  $("#job-form").addEventListener("change", (ev) => {
    if (ev.target.type !== "file") schedule();
  });
  $("#model").addEventListener("change", () => {
    uploaded = null;
    $("#clear-upload").hidden = true;
    $("#upload-note").textContent = "";
  });
  $("#model-file").addEventListener("change", (ev) => {
    const f = ev.target.files[0];
    if (!f) return;
    uploaded = { kind: "file", files: [{ name: f.name, blob: f, size: f.size }] };
    $("#upload-note").textContent = "model: " + f.name;
    $("#clear-upload").hidden = false;
    schedule();
  });
  $("#model-dir").addEventListener("change", async (ev) => {
    try {
      uploaded = await pickDir(ev.target.files);
      $("#upload-note").textContent = `model directory ${uploaded.dir}: ${uploaded.files.map((f) => f.name).join(", ")}`;
      $("#clear-upload").hidden = false;
      schedule();
    } catch (err) {
      setStatus(err.message, true);
    }
  });
  $("#clear-upload").addEventListener("click", () => {
    uploaded = null;
    $("#model-file").value = "";
    $("#model-dir").value = "";
    $("#upload-note").textContent = "";
    $("#clear-upload").hidden = true;
    schedule();
  });
  $("#oom-form").addEventListener("submit", explainOOM);
  $("#snapshot-file").addEventListener("change", replaySnapshot);
  $("#snapshot-what-if").addEventListener("change", replaySnapshot);
  $("#snapshot-predict").addEventListener("change", replaySnapshot);
  update();
}

start().catch((err) => setStatus("could not load the page's data: " + err.message, true));
