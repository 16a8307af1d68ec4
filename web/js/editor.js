// The playground's JavaScript side, bundled by esbuild into dist/editor.js and imported by the
// Rust crate through wasm-bindgen (`raw_module = "./editor.js"`): CodeMirror 6 editors (the
// fusion language mode, lint marks, completion and hover docs from the language reference, a
// read-only viewer that folds the CUDA helpers before the kernel) and the runner API over
// fetch (JSON requests and server-sent events read from a streamed body, so a bearer token can
// be sent, which EventSource cannot do).

import { EditorState, Compartment } from "@codemirror/state";
import {
  EditorView,
  keymap,
  lineNumbers,
  highlightActiveLine,
  highlightActiveLineGutter,
  drawSelection,
  highlightSpecialChars,
  hoverTooltip,
} from "@codemirror/view";
import { defaultKeymap, history, historyKeymap, indentWithTab } from "@codemirror/commands";
import {
  StreamLanguage,
  HighlightStyle,
  syntaxHighlighting,
  bracketMatching,
  indentOnInput,
  foldGutter,
  foldKeymap,
  codeFolding,
  foldEffect,
  unfoldEffect,
  foldedRanges,
} from "@codemirror/language";
import {
  closeBrackets,
  closeBracketsKeymap,
  autocompletion,
  completionKeymap,
} from "@codemirror/autocomplete";
import { lintGutter, setDiagnostics } from "@codemirror/lint";
import { tags } from "@lezer/highlight";

// ---- the fusion language -------------------------------------------------------------------

const KEYWORDS = new Set(["fusion", "schedule", "input", "output"]);
const DTYPES = new Set(["f32", "f16", "bf16", "i32", "f64"]);
const PARALLEL = new Set([
  "BIDx", "BIDy", "BIDz", "TIDx", "TIDy", "TIDz", "Vectorize", "Unroll", "Serial", "Bulk",
]);
const OPTIONS = new Set(["inner", "outer", "local", "shared", "global", "plain", "axis", "memory", "load"]);

const fusionLanguage = StreamLanguage.define({
  name: "fusion",
  startState: () => ({}),
  token(stream) {
    if (stream.eatSpace()) return null;
    if (stream.match("//")) {
      stream.skipToEnd();
      return "comment";
    }
    if (stream.match(/^[0-9]+(\.[0-9]*)?([eE][+-]?[0-9]+)?/) || stream.match(/^\.[0-9]+/)) {
      return "number";
    }
    const word = stream.match(/^[A-Za-z_][A-Za-z0-9_]*/);
    if (word) {
      const w = word[0];
      if (KEYWORDS.has(w)) return "keyword";
      if (DTYPES.has(w)) return "typeName";
      if (PARALLEL.has(w)) return "atom";
      if (OPTIONS.has(w) && stream.match(/^\s*=/, false)) return "propertyName";
      if (OPTIONS.has(w)) return "atom";
      if (stream.match(/^\s*\(/, false)) return "variableName.function";
      return "variableName";
    }
    const ch = stream.next();
    if ("()[]{}".includes(ch)) return "bracket";
    if ("+-*/=<>".includes(ch)) return "operator";
    if (ch === "." || ch === "," || ch === ":") return "punctuation";
    return null;
  },
  languageData: {
    commentTokens: { line: "//" },
    closeBrackets: { brackets: ["(", "[", "{"] },
    indentOnInput: /^\s*\}$/,
  },
});

// ---- CUDA C++ (the emitted kernel): a small tokenizer instead of the full C++ grammar --------

const CPP_KEYWORDS = new Set(
  ("if else for while do return break continue switch case default goto typedef struct union enum " +
    "template typename using namespace static const constexpr volatile inline extern sizeof " +
    "alignof alignas static_assert true false nullptr auto operator").split(" "),
);
const CPP_TYPES = new Set(
  ("void bool char short int long float double unsigned signed size_t int8_t int16_t int32_t " +
    "int64_t uint8_t uint16_t uint32_t uint64_t float2 float4 int2 int4 uint2 uint4 __half __half2 " +
    "__nv_bfloat16 __nv_bfloat162 half index_t dim3").split(" "),
);
const CUDA_QUALIFIERS = new Set(
  ("__global__ __device__ __host__ __shared__ __constant__ __restrict__ __forceinline__ " +
    "__launch_bounds__ __align__ __noinline__").split(" "),
);
const CUDA_BUILTINS = new Set("threadIdx blockIdx blockDim gridDim warpSize".split(" "));

const cudaLanguage = StreamLanguage.define({
  name: "cuda",
  startState: () => ({ inComment: false }),
  token(stream, state) {
    if (state.inComment) {
      if (stream.skipTo("*/")) {
        stream.pos += 2;
        state.inComment = false;
      } else stream.skipToEnd();
      return "comment";
    }
    if (stream.eatSpace()) return null;
    if (stream.sol() && stream.match(/^#\s*[a-z]+/)) {
      stream.skipToEnd();
      return "meta";
    }
    if (stream.match("//")) {
      stream.skipToEnd();
      return "comment";
    }
    if (stream.match("/*")) {
      state.inComment = true;
      return "comment";
    }
    if (stream.match(/^"([^"\\]|\\.)*"?/)) return "string";
    if (stream.match(/^'([^'\\]|\\.)*'?/)) return "string";
    if (stream.match(/^(0x[0-9a-fA-F]+|[0-9]+(\.[0-9]*)?([eE][+-]?[0-9]+)?|\.[0-9]+([eE][+-]?[0-9]+)?)[uUlLfF]*/)) {
      return "number";
    }
    const word = stream.match(/^[A-Za-z_][A-Za-z0-9_]*/);
    if (word) {
      const w = word[0];
      if (CPP_KEYWORDS.has(w)) return "keyword";
      if (CPP_TYPES.has(w)) return "typeName";
      if (CUDA_QUALIFIERS.has(w)) return "modifier";
      if (CUDA_BUILTINS.has(w)) return "atom";
      if (stream.match(/^\s*\(/, false)) return "variableName.function";
      return "variableName";
    }
    const ch = stream.next();
    if ("()[]{}".includes(ch)) return "bracket";
    if ("+-*/%=<>!&|^~?".includes(ch)) return "operator";
    return "punctuation";
  },
  languageData: { commentTokens: { line: "//", block: { open: "/*", close: "*/" } } },
});

// ---- the kernel IR printed after every pass --------------------------------------------------

const IR_KEYWORDS = new Set(
  "kernel fusion param alloc for in if else root loop sync __syncthreads grid block".split(" "),
);
const IR_PLACES = new Set("global local shared input output in out".split(" "));

const irLanguage = StreamLanguage.define({
  name: "hopfuse-ir",
  token(stream) {
    if (stream.eatSpace()) return null;
    if (stream.match("//")) {
      stream.skipToEnd();
      return "comment";
    }
    if (stream.match(/^@[A-Za-z]+/)) return "atom";
    if (stream.match(/^[0-9]+(\.[0-9]*)?([eE][+-]?[0-9]+)?/)) return "number";
    const word = stream.match(/^[A-Za-z_][A-Za-z0-9_]*/);
    if (word) {
      const w = word[0];
      if (IR_KEYWORDS.has(w)) return "keyword";
      if (DTYPES.has(w)) return "typeName";
      if (PARALLEL.has(w)) return "atom";
      if (IR_PLACES.has(w)) return "propertyName";
      if (stream.match(/^\s*\(/, false)) return "variableName.function";
      return "variableName";
    }
    const ch = stream.next();
    if ("()[]{}".includes(ch)) return "bracket";
    if ("+-*/%=<>!&|".includes(ch)) return "operator";
    return "punctuation";
  },
  languageData: { commentTokens: { line: "//" } },
});

// ---- Python (the PyTorch pane's twin) -------------------------------------------------------

const PY_KEYWORDS = new Set(
  ("def return import from as if else elif for in while and or not is None True False lambda " +
    "with pass").split(" "),
);

// The twin's docstrings are one line, so a triple quote runs to the end of its line.
const pythonLanguage = StreamLanguage.define({
  name: "python",
  token(stream) {
    if (stream.eatSpace()) return null;
    if (stream.match("#")) {
      stream.skipToEnd();
      return "comment";
    }
    if (stream.match(/^("""|''')/)) {
      stream.skipToEnd();
      return "string";
    }
    if (stream.match(/^"([^"\\]|\\.)*"?/) || stream.match(/^'([^'\\]|\\.)*'?/)) return "string";
    if (stream.match(/^[0-9]+(\.[0-9]*)?([eE][+-]?[0-9]+)?/)) return "number";
    const word = stream.match(/^[A-Za-z_][A-Za-z0-9_]*/);
    if (word) {
      if (PY_KEYWORDS.has(word[0])) return "keyword";
      if (stream.match(/^\s*\(/, false)) return "variableName.function";
      return "variableName";
    }
    const ch = stream.next();
    if ("()[]{}".includes(ch)) return "bracket";
    if ("+-*/%=<>!&|@~^".includes(ch)) return "operator";
    return "punctuation";
  },
  languageData: { commentTokens: { line: "#" } },
});

// Colours come from CSS variables, so the light/dark switch is a class on <html>.
const highlight = HighlightStyle.define([
  { tag: tags.keyword, color: "var(--tok-keyword)", fontWeight: "600" },
  { tag: [tags.typeName, tags.standard(tags.typeName)], color: "var(--tok-type)" },
  { tag: tags.atom, color: "var(--tok-atom)" },
  { tag: [tags.number, tags.bool], color: "var(--tok-number)" },
  { tag: [tags.string, tags.character], color: "var(--tok-string)" },
  { tag: [tags.comment, tags.lineComment, tags.blockComment], color: "var(--tok-comment)", fontStyle: "italic" },
  { tag: [tags.function(tags.variableName), tags.function(tags.propertyName), tags.macroName], color: "var(--tok-function)" },
  { tag: [tags.propertyName], color: "var(--tok-property)" },
  { tag: [tags.operator, tags.punctuation, tags.bracket], color: "var(--tok-operator)" },
  { tag: [tags.processingInstruction, tags.meta], color: "var(--tok-meta)" },
  { tag: [tags.controlKeyword, tags.modifier, tags.definitionKeyword], color: "var(--tok-keyword)", fontWeight: "600" },
]);

const baseTheme = EditorView.theme({
  "&": { height: "100%", fontSize: "13px", backgroundColor: "var(--bg-editor)", color: "var(--fg)" },
  ".cm-scroller": { fontFamily: "var(--mono)", lineHeight: "1.45" },
  ".cm-content": { caretColor: "var(--fg)" },
  ".cm-cursor, .cm-dropCursor": { borderLeftColor: "var(--fg)" },
  ".cm-gutters": { backgroundColor: "var(--bg-gutter)", color: "var(--fg-dim)", border: "none" },
  ".cm-activeLine": { backgroundColor: "var(--bg-active)" },
  ".cm-activeLineGutter": { backgroundColor: "var(--bg-active)" },
  "&.cm-focused .cm-selectionBackground, .cm-selectionBackground, ::selection": {
    backgroundColor: "var(--bg-selection) !important",
  },
  ".cm-matchingBracket": { backgroundColor: "var(--bg-bracket)", outline: "1px solid var(--fg-dim)" },
  ".cm-tooltip": { backgroundColor: "var(--bg-panel)", color: "var(--fg)", border: "1px solid var(--border)" },
  ".cm-panels": { backgroundColor: "var(--bg-panel)", color: "var(--fg)" },
});

// ---- completion and hover docs ---------------------------------------------------------------

/** The tensors a program names: inputs, outputs, assignments and schedule bindings. */
function tensorNames(text) {
  const names = new Map();
  for (const m of text.matchAll(/^[ \t]*(?:input|output)[ \t]+([A-Za-z_]\w*)/gm)) names.set(m[1], m[0].trim());
  for (const m of text.matchAll(/^[ \t]*([A-Za-z_]\w*)[ \t]*=(?!=)([^\n]*)/gm)) {
    if (!KEYWORDS.has(m[1])) names.set(m[1], `${m[1]} =${m[2]}`.trim());
  }
  return names;
}

/** The block (`fusion` or `schedule`) whose braces hold offset `pos`, or null outside both. */
function blockAt(text, pos) {
  let block = null;
  let depth = 0;
  for (const m of text.slice(0, pos).replace(/\/\/[^\n]*/g, "").matchAll(/\b(fusion|schedule)\b|[{}]/g)) {
    if (m[1] && depth === 0) block = m[1];
    else if (m[0] === "{") depth++;
    else if (m[0] === "}" && --depth === 0) block = null;
  }
  return depth > 0 ? block : null;
}

const COMPLETION_TYPES = {
  keyword: "keyword", dtype: "type", op: "function", schedule: "method",
  parallel: "constant", memory: "enum", load: "enum", argument: "property",
};

// ---- the language reference ------------------------------------------------------------------

/**
 * The language reference (web/reference.json, generated from web/src/reference.rs): its
 * `sections` [{title, anchor, entries: [{name, kind, signature, doc}]}] and all their
 * `entries`. Fetched the first time the dialog opens, a completion is asked for or a name is
 * hovered, not on the page's load; a failed fetch is tried again next time.
 */
let reference = null;
function loadReference() {
  reference ??= fetch(new URL("reference.json", import.meta.url))
    .then((r) => {
      if (!r.ok) throw new Error(`reference.json: HTTP ${r.status}`);
      return r.json();
    })
    .then((sections) => ({ sections, entries: sections.flatMap((x) => x.entries) }))
    .catch((e) => {
      reference = null;
      throw e;
    });
  return reference;
}
/** Every entry, or none while the reference cannot be fetched. */
const referenceEntries = () => loadReference().then((r) => r.entries, () => []);

/**
 * Shows the reference's rows (and the examples listed after `el`) that hold every word of
 * `query`, a section's heading only while it has one; says so when nothing matches.
 */
function filterReference(el, query) {
  const words = query.toLowerCase().split(/\s+/).filter(Boolean);
  const shows = (node) => words.every((w) => node.textContent.toLowerCase().includes(w));
  const dialog = el.closest(".dialog") ?? el;
  let found = 0;
  for (const row of dialog.querySelectorAll(".ref-table tr, .ref-examples li")) {
    row.hidden = !shows(row);
    if (!row.hidden) found++;
  }
  for (const list of dialog.querySelectorAll(".ref-table, .ref-examples")) {
    const empty = !list.querySelector("tr:not([hidden]), li:not([hidden])");
    list.hidden = empty;
    const head = list.previousElementSibling;
    if (head && /^H[34]$/.test(head.tagName)) head.hidden = empty;
  }
  let none = dialog.querySelector("#ref-none");
  if (!none) {
    none = document.createElement("p");
    none.id = "ref-none";
    none.className = "note";
    el.after(none);
  }
  none.textContent = found ? "" : `Nothing in the reference matches “${query.trim()}”.`;
  none.hidden = found > 0;
}

/** Fills `el` with the reference's tables and a search box (the Reference dialog). */
export function fillReference(el) {
  loadReference().then(
    ({ sections }) => {
      const cell = (text, cls) => {
        const td = document.createElement("td");
        if (cls) td.className = cls;
        td.textContent = text;
        return td;
      };
      const search = document.createElement("input");
      search.type = "search";
      search.id = "ref-search";
      search.placeholder = "Search the reference (name or words)";
      search.setAttribute("aria-label", "search the reference");
      search.oninput = () => filterReference(el, search.value);
      el.replaceChildren(
        search,
        ...sections.flatMap((s) => {
          const h = document.createElement("h3");
          h.id = `ref-section-${s.anchor}`;
          h.textContent = s.title;
          const table = document.createElement("table");
          table.className = "params ref-table";
          for (const e of s.entries) {
            const tr = table.insertRow();
            tr.id = `ref-${e.name}`;
            tr.append(cell(e.name, "mono ref-name"), cell(e.signature, "mono ref-sig"), cell(e.doc));
          }
          return [h, table];
        }),
      );
    },
    (e) => {
      el.textContent = `The reference could not be fetched (${e.message}); docs/language.md in the repository is the same table.`;
    },
  );
}

/**
 * Completion from the language reference and the program's tensors. After `t.` only schedule
 * primitives; as the second argument of parallelize, parallel types; after `memory=`, `load=`,
 * `store=`, their kinds.
 */
function completionSource() {
  const option = (e) => ({
    label: e.name,
    type: COMPLETION_TYPES[e.kind] ?? "variable",
    detail: e.signature.length > 48 ? e.signature.slice(0, 47) + "…" : e.signature,
    info: `${e.signature}\n\n${e.doc}`,
  });
  return async (context) => {
    const word = context.matchBefore(/[A-Za-z_]\w*/);
    const line = context.state.doc.lineAt(context.pos);
    const before = line.text.slice(0, (word ? word.from : context.pos) - line.from);
    if (!word && !context.explicit) return null;
    const from = word ? word.from : context.pos;
    const entries = await referenceEntries();
    const byKind = (...kinds) => entries.filter((e) => kinds.includes(e.kind)).map(option);
    let options;
    if (/\.\s*$/.test(before)) options = entries.filter((e) => e.kind === "schedule" && /^\w+\./.test(e.signature)).map(option);
    else if (/\.parallelize\(\s*\d+\s*,\s*$/.test(before)) options = byKind("parallel");
    else if (/\bmemory\s*=\s*$/.test(before)) options = byKind("memory");
    else if (/\b(load|store)\s*=\s*$/.test(before)) options = byKind("load");
    else {
      // In the fusion body: its ops, dtypes and keywords, and the tensors defined above the
      // line; in the schedule: every tensor and the schedule's names.
      const doc = context.state.doc.toString();
      const inFusion = blockAt(doc, line.from) === "fusion";
      const known = tensorNames(inFusion ? doc.slice(0, line.from) : doc);
      const tensors = [...known].map(([name, decl]) => ({
        label: name, type: "variable", detail: "tensor", info: decl, boost: 1,
      }));
      const kinds = inFusion ? ["op", "dtype", "keyword"] : ["schedule", "parallel", "memory", "load", "keyword"];
      options = [...tensors, ...byKind(...kinds)];
    }
    return { from, options, validFor: /^\w*$/ };
  };
}

/** Hover docs: the reference entry (or the tensor's declaration) of the word under the mouse. */
function hoverDocs() {
  return hoverTooltip(async (view, pos) => {
    const { from, to, text } = view.state.doc.lineAt(pos);
    let start = pos, end = pos;
    while (start > from && /\w/.test(text[start - from - 1])) start--;
    while (end < to && /\w/.test(text[end - from])) end++;
    if (start === end) return null;
    const word = text.slice(start - from, end - from);
    const entry = (await referenceEntries()).find((e) => e.name === word);
    const decl = entry ? null : tensorNames(view.state.doc.toString()).get(word);
    if (!entry && !decl) return null;
    return {
      pos: start,
      end,
      above: true,
      create() {
        const dom = document.createElement("div");
        dom.className = "hf-doc";
        const sig = document.createElement("div");
        sig.className = "hf-doc-sig";
        sig.textContent = entry ? entry.signature : decl;
        const doc = document.createElement("div");
        doc.className = "hf-doc-text";
        doc.textContent = entry ? entry.doc : `The tensor \`${word}\` of this program.`;
        dom.append(sig, doc);
        return { dom };
      },
    };
  });
}

// ---- editors ---------------------------------------------------------------------------------

/** Compiles this fast or faster run on every edit; slower ones wait for a pause in typing. */
const FAST_COMPILE_MS = 25;

/**
 * The program editor. `onChange(text)` runs right after an edit while the last call took at
 * most FAST_COMPILE_MS (one call per burst of edits in the same task); after a slower one it
 * waits for a pause of twice that call's time, at most `maxDelayMs`.
 */
export class FusionEditor {
  constructor(parent, doc, maxDelayMs, onChange, onShortcut) {
    this.timer = null;
    this.queued = false;
    this.lastMs = 0;
    this.onChange = onChange;
    this.maxDelayMs = maxDelayMs;
    /** The documents of the tabs not shown, by key (each with its own undo history). */
    this.saved = new Map();
    this.key = "a";
    const shortcuts = keymap.of([
      { key: "Mod-Enter", run: () => (onShortcut("run"), true) },
      { key: "Mod-s", run: () => (onShortcut("short-link"), true) },
    ]);
    this.extensions = [
      shortcuts,
      lineNumbers(),
      highlightActiveLineGutter(),
      highlightSpecialChars(),
      history(),
      foldGutter(),
      drawSelection(),
      indentOnInput(),
      bracketMatching(),
      closeBrackets(),
      highlightActiveLine(),
      lintGutter(),
      fusionLanguage,
      syntaxHighlighting(highlight),
      baseTheme,
      autocompletion({ override: [completionSource()], icons: false }),
      hoverDocs(),
      keymap.of([
        ...closeBracketsKeymap,
        ...completionKeymap,
        ...defaultKeymap,
        ...historyKeymap,
        ...foldKeymap,
        indentWithTab,
      ]),
      EditorView.updateListener.of((u) => {
        if (!u.docChanged || u.transactions.every((t) => t.annotation(EditorState.userEvent) === "hopfuse.set")) return;
        this.schedule();
      }),
      EditorView.lineWrapping,
      EditorView.contentAttributes.of({ "aria-label": "fusion program" }),
    ];
    this.view = new EditorView({ parent, state: EditorState.create({ doc, extensions: this.extensions }) });
  }
  /** Compiles now (after the current update, in a microtask) or after a pause. */
  schedule() {
    clearTimeout(this.timer);
    if (this.lastMs <= FAST_COMPILE_MS) {
      if (this.queued) return;
      this.queued = true;
      queueMicrotask(() => {
        this.queued = false;
        this.fire();
      });
    } else {
      this.timer = setTimeout(() => this.fire(), Math.min(this.maxDelayMs, Math.ceil(2 * this.lastMs)));
    }
  }
  fire() {
    const t0 = performance.now();
    this.onChange(this.view.state.doc.toString());
    this.lastMs = performance.now() - t0;
  }
  goto(offset) {
    const pos = Math.max(0, Math.min(offset, this.view.state.doc.length));
    this.view.dispatch({ selection: { anchor: pos }, scrollIntoView: true });
    this.view.focus();
  }
  /** Shows the document of tab `key` holding `text`: the tab's own editor state (undo history,
   * selection) when it still holds `text`, else a new one. A pending edit is dropped: the caller
   * reads text() before switching. */
  switchTo(key, text) {
    if (key === this.key) return;
    clearTimeout(this.timer);
    this.queued = false;
    this.saved.set(this.key, this.view.state);
    const old = this.saved.get(key);
    this.saved.delete(key);
    this.key = key;
    this.view.setState(
      old && old.doc.toString() === text ? old : EditorState.create({ doc: text, extensions: this.extensions }),
    );
  }
  /** Forgets the saved document of a tab that was closed. */
  forget(key) {
    this.saved.delete(key);
  }
  text() {
    return this.view.state.doc.toString();
  }
  /** Replaces the program without calling onChange (the caller compiles it itself). */
  setText(text) {
    this.view.dispatch({
      changes: { from: 0, to: this.view.state.doc.length, insert: text },
      userEvent: "hopfuse.set",
    });
  }
  /** `json`: [{from, to, message}] in UTF-16 offsets; severity is always error. */
  setDiagnostics(json) {
    const len = this.view.state.doc.length;
    const list = JSON.parse(json).map((d) => {
      const from = Math.max(0, Math.min(d.from, len));
      const to = Math.max(from, Math.min(d.to, len));
      return { from, to, severity: "error", message: d.message, source: "hopfuse" };
    });
    this.view.dispatch(setDiagnostics(this.view.state, list));
  }
  focus() {
    this.view.focus();
  }
}

/** The first line of the emitted kernel; everything above it is helpers. */
const KERNEL_LINE = /^extern "C" __global__/;

/**
 * A read-only viewer: `lang` is "cpp" (CUDA), "ir" (the kernel IR), "fusion" (a program) or
 * "python" (the PyTorch twin).
 * The CUDA viewer folds the helpers before the kernel, so the kernel is what shows first; once
 * the user opens them they stay open.
 */
export class CodeViewer {
  constructor(parent, lang) {
    this.lang = lang;
    this.wrap = new Compartment();
    this.preludeOpen = false;
    this.refolding = false;
    const lines = (state, range) => state.doc.lineAt(range.to).number - state.doc.lineAt(range.from).number + 1;
    const extensions = [
      lineNumbers(),
      highlightSpecialChars(),
      drawSelection(),
      highlightActiveLine(),
      codeFolding({
        preparePlaceholder: (state, range) =>
          range.from === 0 && lang === "cpp"
            ? `⋯ ${lines(state, range)} lines of helpers before the kernel (click to show)`
            : `⋯ ${lines(state, range)} lines`,
        placeholderDOM: (view, onclick, text) => {
          const el = document.createElement("span");
          el.className = "cm-foldPlaceholder hf-fold";
          el.textContent = text;
          el.title = "show the folded lines";
          el.onclick = onclick;
          return el;
        },
      }),
      foldGutter(),
      this.wrap.of([]),
      EditorState.readOnly.of(true),
      EditorView.editable.of(false),
      EditorView.contentAttributes.of({ tabindex: "0" }),
      syntaxHighlighting(highlight),
      baseTheme,
      keymap.of(foldKeymap),
      EditorView.updateListener.of((u) => {
        if (this.refolding) return;
        for (const tr of u.transactions) {
          for (const e of tr.effects) if (e.is(unfoldEffect) && e.value.from === 0) this.preludeOpen = true;
        }
      }),
    ];
    if (lang === "cpp") extensions.push(cudaLanguage);
    else if (lang === "ir") extensions.push(irLanguage);
    else if (lang === "fusion") extensions.push(fusionLanguage);
    else if (lang === "python") extensions.push(pythonLanguage);
    this.view = new EditorView({ parent, state: EditorState.create({ doc: "", extensions }) });
  }
  /** Replaces the text by its smallest changed middle, so folds and the scroll position of the
   * unchanged parts stay. */
  setText(text) {
    const old = this.view.state.doc.toString();
    if (text === old) return;
    const n = Math.min(old.length, text.length);
    let a = 0;
    while (a < n && old.charCodeAt(a) === text.charCodeAt(a)) a++;
    let b = 0;
    while (b < n - a && old.charCodeAt(old.length - 1 - b) === text.charCodeAt(text.length - 1 - b)) b++;
    this.view.dispatch({ changes: { from: a, to: old.length - b, insert: text.slice(a, text.length - b) } });
    if (this.lang === "cpp") this.foldPrelude();
  }
  /** Folds lines 1 .. (the kernel's line - 1), unless the user opened them. */
  foldPrelude() {
    if (this.preludeOpen) return;
    const doc = this.view.state.doc;
    let kernel = 0;
    for (let i = 1; i <= doc.lines; i++) {
      if (KERNEL_LINE.test(doc.line(i).text)) {
        kernel = i;
        break;
      }
    }
    if (kernel < 3) return;
    const to = doc.line(kernel - 1).to;
    const effects = [];
    let done = false;
    foldedRanges(this.view.state).between(0, 0, (from, end) => {
      if (from !== 0) return;
      if (end === to) done = true;
      else effects.push(unfoldEffect.of({ from, to: end }));
    });
    if (done) return;
    effects.push(foldEffect.of({ from: 0, to }));
    this.refolding = true;
    this.view.dispatch({ effects });
    this.refolding = false;
  }
  setWrap(on) {
    if (this.wrapped === on) return;
    this.wrapped = on;
    this.view.dispatch({ effects: this.wrap.reconfigure(on ? EditorView.lineWrapping : []) });
  }
}

// ---- the runner API --------------------------------------------------------------------------

function headers(token, json) {
  const h = {};
  if (token) h["Authorization"] = `Bearer ${token}`;
  if (json) h["Content-Type"] = "application/json";
  return h;
}

/**
 * One JSON request. Resolves to {status, body} (body as text) for any HTTP answer; rejects with
 * a message when nothing answered (no runner reachable, CORS refusal, timeout).
 */
export async function apiRequest(method, url, token, body, timeoutMs) {
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(), timeoutMs);
  try {
    const res = await fetch(url, {
      method,
      headers: headers(token, body != null),
      body: body ?? undefined,
      signal: ctl.signal,
      cache: "no-store",
    });
    return { status: res.status, body: await res.text() };
  } catch (e) {
    throw ctl.signal.aborted ? `no answer within ${timeoutMs / 1000} s` : String(e && e.message ? e.message : e);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Server-sent events from `url`: `onEvent(name, data)` for each event; `done()` resolves when the
 * stream ends and rejects with a message when it cannot be opened; `cancel()` stops it.
 */
export class EventStream {
  constructor(url, token, onEvent) {
    this.ctl = new AbortController();
    this.promise = this.read(url, token, onEvent);
  }
  async read(url, token, onEvent) {
    let res;
    try {
      res = await fetch(url, { headers: { ...headers(token, false), Accept: "text/event-stream" }, signal: this.ctl.signal });
    } catch (e) {
      if (this.ctl.signal.aborted) return;
      throw String(e && e.message ? e.message : e);
    }
    if (!res.ok || !res.body) throw `HTTP ${res.status}: ${await res.text()}`;
    const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = "";
    let name = "message";
    let data = [];
    const line = (l) => {
      if (l === "") {
        if (data.length) onEvent(name, data.join("\n"));
        name = "message";
        data = [];
      } else if (l.startsWith(":")) {
        // a comment (keep-alive)
      } else {
        const i = l.indexOf(":");
        const field = i < 0 ? l : l.slice(0, i);
        let value = i < 0 ? "" : l.slice(i + 1);
        if (value.startsWith(" ")) value = value.slice(1);
        if (field === "event") name = value;
        else if (field === "data") data.push(value);
      }
    };
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value;
        let i;
        while ((i = buf.search(/\r\n|\r|\n/)) >= 0) {
          const sep = buf[i] === "\r" && buf[i + 1] === "\n" ? 2 : 1;
          line(buf.slice(0, i));
          buf = buf.slice(i + sep);
        }
      }
    } catch (e) {
      if (this.ctl.signal.aborted) return;
      throw String(e && e.message ? e.message : e);
    }
    if (buf) line(buf);
    line("");
  }
  done() {
    return this.promise;
  }
  cancel() {
    this.ctl.abort();
  }
}

/** Copies text to the clipboard; resolves to true when it worked. */
export async function copyText(text) {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch {
    // No clipboard permission (plain http, headless): fall back to a selected textarea.
    const ta = document.createElement("textarea");
    ta.value = text;
    ta.style.position = "fixed";
    ta.style.opacity = "0";
    document.body.appendChild(ta);
    ta.select();
    let ok = false;
    try {
      ok = document.execCommand("copy");
    } catch {
      ok = false;
    }
    ta.remove();
    return ok;
  }
}

/** Offers `text` as a file download. */
export function download(name, text, mime) {
  const url = URL.createObjectURL(new Blob([text], { type: mime }));
  const a = document.createElement("a");
  a.href = url;
  a.download = name;
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

// ---- the share link's compression ------------------------------------------------------------
// The browser's own raw deflate (CompressionStream), so the wasm carries no deflate of its own.

/** Raw deflate of `bytes` (copied at once, before anything awaits). */
export async function deflateRaw(bytes) {
  const out = new Blob([bytes]).stream().pipeThrough(new CompressionStream("deflate-raw"));
  return new Uint8Array(await new Response(out).arrayBuffer());
}

/** Inflates raw-deflated `bytes`; throws on damaged data or past `limit` bytes of output. */
export async function inflateRaw(bytes, limit) {
  const reader = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("deflate-raw")).getReader();
  const parts = [];
  let n = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    n += value.length;
    if (n > limit) {
      await reader.cancel();
      throw new Error(`more than ${limit} bytes`);
    }
    parts.push(value);
  }
  const out = new Uint8Array(n);
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}
