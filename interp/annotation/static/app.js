// The labelling page. Trajectory text is inserted with textContent only (never innerHTML); characters that would
// act on the layout or hide are shown as readable escapes (\x1b, \u202e) in marked spans, and every inline
// trajectory string sits in a <bdi> (bidi isolation). Every URL is relative (the page works under a path prefix, as
// jupyter-server-proxy serves it) and every call carries the token.
"use strict";
(() => {
  const token = document.querySelector('meta[name="annotate-token"]').content;
  const COLLAPSE = 600; // longer observations show this many characters until clicked
  const KEYS = ["0", "1", "s", "u", "j", "k", "e", "b", "f", "h", "ArrowRight", "ArrowLeft"];
  const $ = (id) => document.getElementById(id);
  let state = null;
  let index = 0;
  let shown = null; // the item index on screen (its scroll position is kept while it stays)
  let onScreen = null; // the item payload on screen
  let gone = false;
  let chain = Promise.resolve(); // key presses and clicks are handled one after the other, in order

  // C0 controls but tab and newline, DEL, C1 controls, every invisible format character (Unicode Cf: bidi
  // embeddings/overrides/isolates/marks, zero-width space/joiners, word joiner, soft hyphen, the byte-order mark,
  // tags), line and paragraph separators: shown as escapes, never passed to the layout, so "code\u200b-001" and
  // "code-001" never look the same.
  const SPECIAL = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u2028\u2029]|\p{Cf}/gu;
  const NAMES = {"\u202a": "LEFT-TO-RIGHT EMBEDDING", "\u202b": "RIGHT-TO-LEFT EMBEDDING",
    "\u202c": "POP DIRECTIONAL FORMATTING", "\u202d": "LEFT-TO-RIGHT OVERRIDE", "\u202e": "RIGHT-TO-LEFT OVERRIDE",
    "\u2066": "LEFT-TO-RIGHT ISOLATE", "\u2067": "RIGHT-TO-LEFT ISOLATE", "\u2068": "FIRST STRONG ISOLATE",
    "\u2069": "POP DIRECTIONAL ISOLATE", "\u200e": "LEFT-TO-RIGHT MARK", "\u200f": "RIGHT-TO-LEFT MARK",
    "\u061c": "ARABIC LETTER MARK", "\u001b": "ESCAPE", "\r": "CARRIAGE RETURN", "\u200b": "ZERO WIDTH SPACE",
    "\u200c": "ZERO WIDTH NON-JOINER", "\u200d": "ZERO WIDTH JOINER", "\u2060": "WORD JOINER",
    "\u00ad": "SOFT HYPHEN", "\ufeff": "ZERO WIDTH NO-BREAK SPACE (byte-order mark)"};

  function escapeOf(c) {
    const code = c.codePointAt(0);
    if (code < 0x100) return "\\x" + code.toString(16).padStart(2, "0");
    return code < 0x10000 ? "\\u" + code.toString(16).padStart(4, "0") : "\\u{" + code.toString(16) + "}";
  }

  // text -> nodes: plain runs as text nodes, each special character as a marked escape span
  function fill(node, text) {
    const s = String(text);
    node.replaceChildren();
    let last = 0;
    for (const m of s.matchAll(SPECIAL)) {
      if (m.index > last) node.appendChild(document.createTextNode(s.slice(last, m.index)));
      const mark = document.createElement("span");
      mark.className = "esc";
      mark.textContent = escapeOf(m[0]);
      mark.title = NAMES[m[0]] || (/\p{Cf}/u.test(m[0]) ? "invisible format character" : "control character");
      node.appendChild(mark);
      last = m.index + m[0].length;
    }
    if (last < s.length) node.appendChild(document.createTextNode(s.slice(last)));
    return node;
  }

  function el(tag, cls, text) {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined) fill(node, text);
    return node;
  }

  const iso = (text) => el("bdi", null, text); // one trajectory string, isolated from its surroundings

  function showGone(reason) {
    if (gone) return;
    gone = true;
    const box = $("gone");
    box.replaceChildren(
      el("strong", null, "The labelling server is not answering"), document.createTextNode(` (${reason}). `),
      document.createTextNode("Every label this page reported as saved is on disk: "), el("code", null,
        state ? state.labels_csv : "the --labels CSV"),
      document.createTextNode(state ? " (journal " : ""), state ? el("code", null, state.journal) : "",
      document.createTextNode(state ? "). " : ". "),
      document.createTextNode("A key press without a \u201csaved\u201d message may be missing. To go on, run "),
      el("code", null, state && state.restart ? state.restart : "interp annotate with the same options"),
      document.createTextNode(" and open the new URL it prints: it resumes at the first unlabelled item."));
    box.hidden = false;
    say("server gone", true);
  }

  async function api(path, body) {
    const opts = {headers: {"X-Annotate-Token": token}};
    if (body !== undefined) {
      opts.method = "POST";
      opts.headers["Content-Type"] = "application/json";
      opts.body = JSON.stringify(body);
    }
    let reply;
    try {
      reply = await fetch(path, opts); // relative: resolves under whatever prefix served the page
    } catch (err) {
      showGone("no connection");
      throw new Error("the server is gone");
    }
    let data = null;
    try { data = await reply.json(); } catch (err) { data = null; }
    // a proxy in front (jupyter-server-proxy) answers for a dead server with 5xx and no JSON
    if ([502, 503, 504, 599].includes(reply.status) || (data === null && reply.status >= 500)) {
      showGone(`HTTP ${reply.status}`);
      throw new Error("the server is gone");
    }
    if (!reply.ok || data === null) throw new Error((data && data.error) || `HTTP ${reply.status}`);
    return data;
  }

  function pre(cls, text, collapsible) {
    const body = el("pre", cls);
    if (collapsible && text.length > COLLAPSE) {
      fill(body, text.slice(0, COLLAPSE) + " \u2026");
      const more = el("button", "expand", `show all (${text.length} characters)`);
      more.type = "button";
      more.addEventListener("click", () => { fill(body, text); more.remove(); });
      return [body, more];
    }
    fill(body, text);
    return [body];
  }

  function piece(kind, label, text, collapsible) {
    const box = el("div", "piece " + kind);
    box.appendChild(el("div", "label", label));
    pre("text", text, collapsible).forEach((n) => box.appendChild(n));
    return box;
  }

  function part(label, text, open) { // a collapsible part of the history (system prompt, tools, task)
    const box = el("details", "part");
    box.open = open;
    box.appendChild(el("summary", null, label));
    pre("text", text, false).forEach((n) => box.appendChild(n));
    return box;
  }

  function diffNode(lines) {
    const box = el("pre", "diff");
    const cls = {"+": "add", "-": "del", "@": "hunk", " ": "ctx"};
    lines.forEach(([op, text]) => {
      const line = el("span", cls[op] || "ctx");
      if (op === "+" || op === "-" || op === " ") line.appendChild(document.createTextNode(op === " " ? "  " : op + " "));
      line.appendChild(el("span", null, text));
      box.appendChild(line);
    });
    return box;
  }

  function codeNode(arg) { // code as written; Pygments' token classes (from the server) colour it, text stays text
    if (!arg.tokens) return el("pre", "code", arg.text);
    const box = el("pre", "code");
    arg.tokens.forEach(([cls, text]) => box.appendChild(cls ? el("span", "tok-" + cls, text)
                                                            : fill(document.createElement("span"), text)));
    return box;
  }

  function callNode(call) {
    const box = el("div", "piece action call");
    const head = el("div", "label", "action: ");
    head.appendChild(el("bdi", "tool", call.tool));
    box.appendChild(head);
    call.args.forEach((a) => {
      const arg = el("div", "arg");
      if (a.kind === "value") {
        const line = el("pre", null);
        line.appendChild(el("span", "name", a.name + ": "));
        line.appendChild(el("bdi", null, a.text));
        arg.appendChild(line);
      } else {
        arg.appendChild(el("div", "name", a.name + (a.kind === "diff" ? " (diff)" : "")));
        arg.appendChild(a.kind === "diff" ? diffNode(a.lines) : codeNode(a));
      }
      box.appendChild(arg);
    });
    return box;
  }

  function stepNode(s, kind) {
    // a section with a clickable head, not <details>: 76 details elements made each item's layout ~3x slower
    const box = el("section", "step" + (kind ? " " + kind : ""));
    box.dataset.step = String(s.step);
    const head = el("h3", "step-head", `${kind === "later" ? "later step" : "step"} ${s.step}`);
    head.title = "click to collapse or expand";
    head.addEventListener("click", () => box.classList.toggle("collapsed"));
    box.appendChild(head);
    if (!s.reasoning.length) box.appendChild(el("div", "muted", "(no reasoning)"));
    s.reasoning.forEach((b, k) => box.appendChild(piece("reasoning", `reasoning block ${k + 1}`, b, false)));
    if (s.calls.length) s.calls.forEach((c) => box.appendChild(callNode(c)));
    else box.appendChild(piece("action", "action (text)", s.action, true));
    s.observations.forEach((o, k) => box.appendChild(
      piece("observation", s.observations.length > 1 ? `observation ${k + 1}` : "observation", o, true)));
    return box;
  }

  const valueText = (v) => (v === null || v === undefined ? "\u2014" : String(v));
  const isOpen = (mark) => mark !== "0" && mark !== "1";

  function progress(reply) {
    state.labelled = reply.labelled;
    if (reply.marks !== undefined) state.marks = reply.marks;
    $("progress").textContent = `${reply.labelled} / ${state.total} labelled`;
    const done = !Array.from(state.marks).some(isOpen);
    $("done").hidden = !done;
    $("done").textContent = done ? `All ${state.total} items are labelled: ${state.labels_csv} is complete. ` +
      "You can still review and correct with \u2190 \u2192." : "";
  }

  function scrollToBoundary() {
    const main = $("scroll");
    const target = $("view").querySelector(".step.new") || $("view").querySelector(".boundary");
    if (!target) return;
    main.scrollTop += target.getBoundingClientRect().top - main.getBoundingClientRect().top - 4;
  }

  function render(v) {
    const short = v.field === "externalization_gap" ? "G" : "y";
    const current = $("current");
    current.replaceChildren(document.createTextNode(`item ${index + 1}/${v.total} \u00b7 `), iso(v.task_id),
      document.createTextNode(" ("), iso(v.domain), document.createTextNode(
        `) \u00b7 b=${v.after_step} of ${v.n_steps} \u00b7 ${short} = ${valueText(v.value)}`));
    current.className = "value" + (v.value === null ? "none" : v.value);
    $("q-text").textContent = `${v.question.name}: ${v.question.question}`;
    $("q1").textContent = v.question["1"];
    $("q0").textContent = v.question["0"];
    $("changed").hidden = !v.changed;

    const same = shown === index;
    const keep = $("scroll").scrollTop;
    const view = document.createDocumentFragment();
    view.appendChild(part("system prompt", v.system_prompt, false));
    if (v.tools) view.appendChild(part("tools", v.tools, false));
    view.appendChild(part("task", v.task, true));
    v.history.forEach((s) => view.appendChild(stepNode(s, s.step === v.after_step ? "new" : "")));
    view.appendChild(el("div", "boundary", `boundary b=${v.after_step}: ${v.question.name} is judged here` +
      (v.later ? " (the later steps follow)" : " (on the history above only)")));
    (v.later || []).forEach((s) => view.appendChild(stepNode(s, "later")));
    $("view").replaceChildren(view);

    const others = $("others"); // beside the question: a reviewer reads the judge's label and reasons first
    others.hidden = !v.others.length;
    others.replaceChildren(...v.others.map((o) => {
      const line = el("div", "other");
      line.append(el("span", "who", o.annotator), document.createTextNode(`: ${short} = ${valueText(o.value)}`));
      if (o.confidence) line.append(document.createTextNode(" \u00b7 confidence "), iso(o.confidence));
      if (o.note) line.append(document.createTextNode(state.mode === "review" ? " \u00b7 why: " : " \u00b7 note: "),
        iso(o.note));
      return line;
    }));

    const ev = $("evidence");
    ev.hidden = !v.evidence;
    ev.replaceChildren();
    if (v.evidence) {
      ev.appendChild(el("div", null, `rule labeler guesses ${short} = ${v.evidence.rule_label} ` +
        "(a weak proxy: judge for yourself)"));
      if (v.evidence.looked_in) {
        ev.appendChild(el("div", null, "looked in: " + v.evidence.looked_in.join("; ")));
        ev.appendChild(el("div", null, `found only in reasoning (${v.evidence.only_in_reasoning.length}):`));
        v.evidence.only_in_reasoning.forEach((it) => ev.appendChild(
          el("div", "item", `${it.kind} "${it.text}" (step ${it.step}, block ${it.block + 1})`)));
      } else {
        v.evidence.fired.forEach((f) => ev.appendChild(el("div", "item", `${f.rule} at step ${f.step}: ${f.cue}`)));
      }
    }
    $("note").value = v.note;
    document.body.dataset.index = String(index);
    document.body.dataset.field = v.field;
    if (same) $("scroll").scrollTop = keep; else scrollToBoundary();
    shown = index;
    onScreen = v;
  }

  async function go(i) {
    index = Math.max(0, Math.min(state.total - 1, i));
    const evidence = $("suggest").getAttribute("aria-pressed") === "true";
    if (evidence) say("computing the rule guess\u2026");
    const v = await api(`api/item/${index}?suggestions=${evidence ? 1 : 0}`);
    progress(v);
    render(v);
    if ($("status").textContent.startsWith("computing")) say("");
  }

  function say(text, error) {
    fill($("status"), text);
    $("status").className = error ? "error" : "";
  }

  const filtering = () => $("filter").getAttribute("aria-pressed") === "true";

  // the next item to show from `from` in direction `step`: any item, or with the filter the next open one
  function target(from, step) {
    if (!filtering()) return from + step;
    for (let i = from + step; i >= 0 && i < state.total; i += step) if (isOpen(state.marks[i])) return i;
    return null;
  }

  async function change(kind, body) {
    const reply = await api(`api/${kind}`, body);
    progress(reply);
    return reply;
  }

  async function after(reply) { // where to go after a label or a skip
    if (!filtering()) return go(reply.index);
    const next = target(index, 1);
    const first = Array.from(state.marks).findIndex(isOpen);
    if (next !== null) return go(next);
    if (first >= 0) return go(first);
    return go(index);
  }

  function toggle(id) {
    const on = $(id).getAttribute("aria-pressed") !== "true";
    $(id).setAttribute("aria-pressed", String(on));
    return on;
  }

  async function handle(key) {
    if (gone) return;
    if (key === "0" || key === "1") {
      const at = index;
      const evidence = $("suggest").getAttribute("aria-pressed") === "true";
      const reviewed = state.mode === "review" && onScreen && onScreen.others.length ? onScreen.others[0] : null;
      const reply = await change("label", {index: at, value: Number(key), suggestions: evidence});
      if (reviewed && reviewed.value !== null) { // recorded with the reviewed label beside it (reviewed_<field>)
        say(Number(key) === reviewed.value ? `confirmed ${reviewed.annotator}'s ${key} at item ${at + 1}`
          : `corrected ${reviewed.annotator}'s ${reviewed.value} to ${key} at item ${at + 1}`);
      } else say(`saved ${key} at item ${at + 1}`);
      await after(reply);
    } else if (key === "s") {
      const reply = await change("skip", {index});
      say(`skipped item ${index + 1}`);
      await after(reply);
    } else if (key === "u") {
      const reply = await change("undo", {});
      if (reply.index === null) { say("nothing to undo"); return; }
      say(`undid the label of item ${reply.index + 1}`);
      await go(reply.index);
    } else if (key === "ArrowRight" || key === "j" || key === "ArrowLeft" || key === "k") {
      const next = target(index, key === "ArrowRight" || key === "j" ? 1 : -1);
      if (next === null) { say("no other unlabelled item that way"); return; }
      await go(next);
    } else if (key === "e") {
      toggle("suggest");
      await go(index);
    } else if (key === "f") {
      say(toggle("filter") ? "walking unlabelled items only" : "walking every item");
      if (filtering() && !isOpen(state.marks[index])) await after({index});
    } else if (key === "b") {
      scrollToBoundary();
    } else if (key === "h") {
      $("guideline").open = true;
      $("guideline").scrollIntoView();
    }
  }

  function queue(work) {
    chain = chain.then(work).catch((err) => say(`error: ${err.message}`, true));
  }

  const typing = (t) => t === $("note") || t === $("goto");
  document.addEventListener("keydown", (event) => {
    if (typing(event.target) || event.ctrlKey || event.metaKey || event.altKey || !state) return;
    if (event.key === "n" || event.key === "g") {
      event.preventDefault();
      if (event.key === "g") $("goto").value = ""; // a fresh number: g 5, then g 7 opens item 7
      $(event.key === "n" ? "note" : "goto").focus();
      return;
    }
    if (KEYS.includes(event.key)) {
      event.preventDefault();
      event.stopPropagation();
      queue(() => handle(event.key));
    }
  });
  document.querySelectorAll("#buttons button[data-key]").forEach((button) => button.addEventListener("click", () => {
    if (state) queue(() => handle(button.dataset.key));
  }));
  $("note").addEventListener("keydown", (event) => {
    if (event.key === "Escape") { $("note").blur(); return; }
    if (event.key !== "Enter") return;
    event.preventDefault();
    const at = index;
    const text = $("note").value;
    $("note").blur();
    queue(async () => { await change("note", {index: at, note: text}); say(`note saved at item ${at + 1}`); });
  });
  $("goto").addEventListener("keydown", (event) => {
    if (event.key === "Escape") { $("goto").blur(); return; }
    if (event.key !== "Enter") return;
    event.preventDefault();
    const n = Number($("goto").value);
    $("goto").blur();
    if (!Number.isInteger(n) || n < 1 || n > state.total) { say(`no item ${$("goto").value}: 1..${state.total}`, true); return; }
    queue(() => go(n - 1));
  });
  // in a notebook frame, keys typed while the notebook has the focus go to Jupyter (command mode): say so
  window.addEventListener("blur", () => { $("focus-hint").hidden = false; });
  window.addEventListener("focus", () => { $("focus-hint").hidden = true; });

  queue(async () => {
    state = await api("api/state");
    $("goto").max = String(state.total);
    if (state.mode === "adjudicate") say(`adjudicating ${state.compared.join(" vs ")}: only their disagreements`);
    if (state.mode === "review") say(`reviewing ${state.reviewed}'s labels: the same key confirms, the other corrects`);
    if (state.flags.length) say(`${state.flags.length} label(s) set aside: their trajectory changed (marked on the item)`, true);
    await go(state.position);
  });
})();
