// attnviz's attention view in the browser: lines between query and key tokens for one head or all
// heads of a layer, an overview of every layer x head, hover or click a token to isolate its
// lines, and what-if knobs computed here from the weights (no rerun of the model).
//
// One ES module, two hosts:
//  - anywidget (Jupyter, VS Code, marimo) calls the default export with no argument and gets
//    { render({ model, el }) }; the widget's state (layer, head, token, temperature, threshold,
//    masked) lives in the model and syncs back to Python.
//  - Streamlit Components v2 calls the default export with { data, parentElement, ... }.
//  - attnviz's static HTML fallback calls it like anywidget with a local stand-in model.
// Tokens are user text: they only ever reach the page through textContent, never as markup.
// No network: nothing is fetched, everything is in `data`.

const SVG = "http://www.w3.org/2000/svg";
const COLOURS = ["#2f6db3", "#e4572e", "#29a36a", "#8e44ad", "#d4a017", "#17a2b8",
  "#c0392b", "#5d6d7e", "#e67e22", "#1abc9c", "#9b59b6", "#7f8c8d"];
const ROW = 20; // px a token
const CSS = `
.attnviz { font: 13px/1.35 system-ui, 'Noto Sans CJK SC', sans-serif; color: #222; }
.attnviz .bar { display: flex; flex-wrap: wrap; gap: 12px; align-items: center; margin: 4px 0 8px; }
.attnviz label { display: inline-flex; gap: 6px; align-items: center; }
.attnviz .panes { display: flex; flex-wrap: wrap; gap: 24px; align-items: flex-start; }
.attnviz .tok { cursor: pointer; user-select: none; }
.attnviz .tok.on { font-weight: 700; fill: #e4572e; }
.attnviz .tok.masked { text-decoration: line-through; fill: #aaa; }
.attnviz .hint { color: #666; font-size: 12px; min-height: 16px; }
.attnviz canvas { cursor: pointer; image-rendering: pixelated; }
`;

function el(tag, attrs = {}, parent = null) {
  const node = tag.startsWith("svg:") ? document.createElementNS(SVG, tag.slice(4))
    : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  if (parent) parent.appendChild(node);
  return node;
}

function decode(w) {
  // {b64, shape} float32 little-endian -> Float32Array
  const raw = atob(w.b64);
  const bytes = new Uint8Array(raw.length);
  for (let i = 0; i < raw.length; i++) bytes[i] = raw.charCodeAt(i);
  return new Float32Array(bytes.buffer);
}

// The what-if: this layer's softmax at temperature T with some keys masked, from its weights
// alone: softmax(l / T) = w^(1/T) / sum(w^(1/T)), and a masked key's weight is 0 before the sum.
export function whatIf(row, temperature, masked) {
  const out = new Float32Array(row.length);
  let sum = 0;
  for (let k = 0; k < row.length; k++) {
    const w = masked.has(k) ? 0 : row[k];
    out[k] = w > 0 ? Math.pow(w, 1 / temperature) : 0;
    sum += out[k];
  }
  if (sum > 0) for (let k = 0; k < row.length; k++) out[k] /= sum;
  return out;
}

class View {
  constructor(root, data, state, onChange) {
    this.data = data;
    this.state = state; // {layer, head, token, temperature, threshold, masked}
    this.onChange = onChange; // (name, value) -> void: tell the host
    this.w = decode(data.weights); // [L, H, Q, K]
    [this.L, this.H, this.Q, this.K] = data.weights.shape;
    this.root = el("div", { class: "attnviz" }, root);
    el("style", {}, this.root).textContent = CSS;
    this.build();
    this.draw();
  }

  row(layer, head, q) {
    const { H, Q, K } = this;
    const at = ((layer * H + head) * Q + q) * K;
    return this.w.subarray(at, at + K);
  }

  set(name, value) {
    this.state[name] = value;
    this.onChange(name, value);
    this.draw();
  }

  control(label, input) {
    const wrap = el("label", {}, this.bar);
    el("span", {}, wrap).textContent = label;
    wrap.appendChild(input);
    return input;
  }

  build() {
    const d = this.data, lab = d.labels || {};
    this.bar = el("div", { class: "bar" }, this.root);
    if (d.pickers) {
      const layer = el("select", { "data-role": "layer" });
      (d.layer_ids || []).forEach((id, i) => {
        el("option", { value: i }, layer).textContent = String(id);
      });
      layer.onchange = () => this.set("layer", Number(layer.value));
      this.layerSelect = this.control(lab.layer || "layer", layer);
      const head = el("select", { "data-role": "head" });
      el("option", { value: -1 }, head).textContent = lab.all_heads || "all";
      for (let h = 0; h < this.H; h++) el("option", { value: h }, head).textContent = String(h);
      head.onchange = () => this.set("head", Number(head.value));
      this.headSelect = this.control(lab.head || "head", head);
    }
    const temp = el("input", { type: "range", min: 0.25, max: 4, step: 0.05,
      "data-role": "temperature" });
    temp.oninput = () => this.set("temperature", Number(temp.value));
    this.tempInput = this.control(lab.temperature || "temperature", temp);
    this.tempText = el("span", {}, this.bar);
    const thr = el("input", { type: "range", min: 0, max: 0.5, step: 0.005,
      "data-role": "threshold" });
    thr.oninput = () => this.set("threshold", Number(thr.value));
    this.thrInput = this.control(lab.threshold || "threshold", thr);
    this.thrText = el("span", {}, this.bar);
    this.status = el("div", { class: "hint", "data-role": "status" }, this.root);
    const panes = el("div", { class: "panes" }, this.root);
    this.svg = el("svg:svg", { "data-role": "lines" }, panes);
    if (d.overview) {
      this.canvas = el("canvas", { "data-role": "overview" }, panes);
      this.canvas.onclick = (e) => this.pickHead(e);
    }
    el("div", { class: "hint" }, this.root).textContent = lab.hint ||
      "Hover a token to isolate its lines; click to keep it; double-click a key to mask it.";
  }

  heads() {
    if (this.state.head >= 0) return [this.state.head];
    return this.data.heads || [...Array(this.H).keys()]; // the app passes its chosen heads
  }

  draw() {
    const s = this.state, d = this.data, lab = d.labels || {};
    if (this.layerSelect) this.layerSelect.value = String(s.layer);
    if (this.headSelect) this.headSelect.value = String(s.head);
    this.tempInput.value = String(s.temperature);
    this.thrInput.value = String(s.threshold);
    this.tempText.textContent = `T = ${s.temperature.toFixed(2)}`;
    this.thrText.textContent = `w ≥ ${s.threshold.toFixed(3)}`;
    this.drawLines(this.hover ?? s.token);
    if (this.canvas) this.drawOverview();
    const masked = [...s.masked].map((k) => d.key_tokens[k]);
    const parts = [];
    if (s.temperature !== 1) parts.push(`${lab.temperature || "temperature"} ${s.temperature}`);
    if (masked.length) parts.push(`${lab.masked || "masked"}: ${masked.join(" ")}`);
    this.status.textContent = parts.length
      ? `${lab.what_if || "what-if (this layer's softmax, from its weights; later layers not rerun)"}: ${parts.join("; ")}`
      : "";
  }

  // The tokens and the frame: drawn on every state change (a knob, a picker, a mask).
  drawLines(focus) {
    const { Q, K } = this, s = this.state, d = this.data;
    const svg = this.svg;
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    const top = 24, height = top + Math.max(Q, K) * ROW + 8;
    this.geo = { left: 150, right: 330, top };
    svg.setAttribute("width", 480);
    svg.setAttribute("height", height);
    svg.setAttribute("viewBox", `0 0 480 ${height}`);
    this.lines = el("svg:g", {}, svg);
    const head = (x, text, anchor) => {
      const t = el("svg:text", { x, y: 12, "text-anchor": anchor, "font-size": 11, fill: "#666" }, svg);
      t.textContent = text;
    };
    head(this.geo.left, (d.labels || {}).query || "query", "end");
    head(this.geo.right, (d.labels || {}).key || "key", "start");
    const masked = new Set(s.masked);
    this.tokens = [];
    const token = (i, side, x, anchor, text) => {
      const id = `${side}${i}`;
      const t = el("svg:text", { x, y: top + i * ROW + 4, "text-anchor": anchor,
        class: "tok", "data-token": id }, svg);
      t.textContent = text; // user text: as text, never markup
      if (side === "k" && masked.has(i)) t.classList.add("masked");
      t.onmouseenter = () => { this.hover = id; this.paint(id); };
      t.onmouseleave = () => { this.hover = null; this.paint(this.state.token); };
      t.onclick = () => { this.hover = null; this.set("token", this.state.token === id ? "" : id); };
      if (side === "k") {
        t.ondblclick = () => {
          const m = new Set(this.state.masked);
          if (m.has(i)) m.delete(i); else m.add(i);
          this.set("masked", [...m].sort((a, b) => a - b));
        };
      }
      this.tokens.push(t);
    };
    d.tokens.forEach((text, i) => token(i, "q", this.geo.left, "end", text));
    d.key_tokens.forEach((text, i) => token(i, "k", this.geo.right, "start", text));
    this.paint(focus);
  }

  // The lines alone (hovering repaints only these, so the token under the mouse stays put).
  paint(focus) {
    const { Q, K } = this, s = this.state, d = this.data, { left, right, top } = this.geo;
    const g = this.lines;
    while (g.firstChild) g.removeChild(g.firstChild);
    const masked = new Set(s.masked);
    const [side, pos] = focus ? [focus[0], Number(focus.slice(1))] : [null, -1];
    let drawn = 0;
    for (const h of this.heads()) {
      const colour = COLOURS[h % COLOURS.length];
      for (let q = 0; q < Q; q++) {
        if (side === "q" && q !== pos) continue;
        const row = whatIf(this.row(s.layer, h, q), s.temperature, masked);
        for (let k = 0; k < K; k++) {
          if (side === "k" && k !== pos) continue;
          const w = row[k];
          if (w < s.threshold || w <= 0) continue;
          const line = el("svg:line", { x1: left + 6, y1: top + q * ROW, x2: right - 6,
            y2: top + k * ROW, stroke: colour, "stroke-width": 2,
            "stroke-opacity": Math.min(1, w).toFixed(3), "data-q": q, "data-k": k }, g);
          el("svg:title", {}, line).textContent =
            `${d.tokens[q]} → ${d.key_tokens[k]}: ${w.toFixed(4)} (head ${h})`;
          drawn++;
        }
      }
    }
    this.svg.setAttribute("data-lines", drawn);
    this.svg.setAttribute("data-focus", focus || "");
    for (const t of this.tokens) t.classList.toggle("on", t.getAttribute("data-token") === focus);
  }

  drawOverview() {
    const { L, H, Q, K } = this, s = this.state;
    const cell = Math.max(24, Math.min(56, Math.floor(640 / H))), gap = 4, pad = 18;
    const c = this.canvas;
    c.width = pad + H * (cell + gap);
    c.height = pad + L * (cell + gap);
    this.cell = { cell, gap, pad };
    const g = c.getContext("2d");
    g.fillStyle = "#fff";
    g.fillRect(0, 0, c.width, c.height);
    g.fillStyle = "#666";
    g.font = "10px sans-serif";
    for (let h = 0; h < H; h++) g.fillText(`H${h}`, pad + h * (cell + gap) + 2, 11);
    for (let l = 0; l < L; l++) g.fillText(`L${(this.data.layer_ids || [])[l] ?? l}`, 0, pad + l * (cell + gap) + 12);
    for (let l = 0; l < L; l++) {
      for (let h = 0; h < H; h++) {
        const tile = new ImageData(K, Q);
        let top = 0;
        for (let q = 0; q < Q; q++) { const r = this.row(l, h, q); for (let k = 0; k < K; k++) top = Math.max(top, r[k]); }
        for (let q = 0; q < Q; q++) {
          const r = this.row(l, h, q);
          for (let k = 0; k < K; k++) {
            const v = top > 0 ? r[k] / top : 0, at = (q * K + k) * 4;
            tile.data[at] = 255 - 208 * v; tile.data[at + 1] = 255 - 146 * v;
            tile.data[at + 2] = 255 - 76 * v; tile.data[at + 3] = 255;
          }
        }
        const x = pad + h * (cell + gap), y = pad + l * (cell + gap);
        const off = document.createElement("canvas");
        off.width = K; off.height = Q;
        off.getContext("2d").putImageData(tile, 0, 0);
        g.imageSmoothingEnabled = false;
        g.drawImage(off, x, y, cell, cell);
        if (l === s.layer && (s.head < 0 || s.head === h)) {
          g.strokeStyle = "#e4572e"; g.lineWidth = 2; g.strokeRect(x - 1, y - 1, cell + 2, cell + 2);
        }
      }
    }
  }

  pickHead(e) {
    const { cell, gap, pad } = this.cell;
    const box = this.canvas.getBoundingClientRect();
    const x = (e.clientX - box.left) * (this.canvas.width / box.width) - pad;
    const y = (e.clientY - box.top) * (this.canvas.height / box.height) - pad;
    const h = Math.floor(x / (cell + gap)), l = Math.floor(y / (cell + gap));
    if (h < 0 || l < 0 || h >= this.H || l >= this.L) return;
    this.state.layer = l;
    this.onChange("layer", l);
    this.set("head", h);
  }
}

function initialState(get) {
  return {
    layer: get("layer") ?? 0,
    head: get("head") ?? -1,
    token: get("token") ?? "",
    temperature: get("temperature") ?? 1,
    threshold: get("threshold") ?? 0.01,
    masked: get("masked") ?? [],
  };
}

// anywidget: render({ model, el }); the model's traits are the state, synced both ways.
function render({ model, el: host }) {
  const names = ["layer", "head", "token", "temperature", "threshold", "masked"];
  const view = new View(host, model.get("data"), initialState((n) => model.get(n)), (n, v) => {
    model.set(n, v);
    model.save_changes();
  });
  const redraw = () => {
    Object.assign(view.state, initialState((n) => model.get(n)));
    view.draw();
  };
  for (const n of names) model.on(`change:${n}`, redraw);
  return () => {
    for (const n of names) model.off(`change:${n}`, redraw);
  };
}

// Streamlit Components v2: the data carries the starting state; hovering, clicking and the knobs
// stay in the browser (nothing is sent back, so nothing reruns the app).
function mountStreamlit({ data, parentElement }) {
  for (const old of [...parentElement.querySelectorAll(".attnviz")]) old.remove();
  const view = new View(parentElement, data, initialState((n) => data[n]), () => {});
  return () => view.root.remove();
}

export default function attnviz(component) {
  if (component && component.parentElement) return mountStreamlit(component);
  return { render };
}
