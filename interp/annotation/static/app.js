// The labelling page. Every piece of trajectory text is inserted with textContent (never innerHTML), control
// characters (terminal escapes) are shown as their Unicode control pictures, and every call carries the token.
"use strict";
(() => {
  const token = document.querySelector('meta[name="annotate-token"]').content;
  const COLLAPSE = 600; // longer actions and observations show this many characters until clicked
  const NAMES = {externalization_gap: "G (externalization gap)", future_necessity: "y (future necessity)"};
  const $ = (id) => document.getElementById(id);
  let state = null;
  let index = 0;
  let chain = Promise.resolve(); // key presses are handled one after the other, in order

  const visible = (text) => String(text).replace(/[\u0000-\u0008\u000b-\u001f\u007f]/g,
    (c) => (c === "\u007f" ? "\u2421" : String.fromCharCode(0x2400 + c.charCodeAt(0))));

  function el(tag, cls, text) {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined) node.textContent = visible(text);
    return node;
  }

  async function api(path, body) {
    const opts = {headers: {"X-Annotate-Token": token}};
    if (body !== undefined) {
      opts.method = "POST";
      opts.headers["Content-Type"] = "application/json";
      opts.body = JSON.stringify(body);
    }
    const reply = await fetch(path, opts);
    const data = await reply.json();
    if (!reply.ok) throw new Error(data.error || String(reply.status));
    return data;
  }

  function piece(kind, label, text, collapsible) {
    const box = el("div", "piece " + kind);
    box.appendChild(el("div", "label", label));
    const body = el("pre", "text");
    box.appendChild(body);
    if (collapsible && text.length > COLLAPSE) {
      body.textContent = visible(text.slice(0, COLLAPSE)) + " \u2026";
      const more = el("button", "expand", `show all (${text.length} characters)`);
      more.addEventListener("click", () => { body.textContent = visible(text); more.remove(); });
      box.appendChild(more);
    } else {
      body.textContent = visible(text);
    }
    return box;
  }

  function stepNode(s, later) {
    const box = el("article", later ? "step later" : "step");
    box.dataset.step = String(s.step);
    box.appendChild(el("h3", null, `${later ? "later step" : "step"} ${s.step}`));
    if (!s.reasoning.length) box.appendChild(el("div", "muted", "(no reasoning)"));
    s.reasoning.forEach((b, k) => box.appendChild(piece("reasoning", `reasoning block ${k + 1}`, b, false)));
    box.appendChild(piece("action", "action", s.action, true));
    s.observations.forEach((o, k) => box.appendChild(
      piece("observation", s.observations.length > 1 ? `observation ${k + 1}` : "observation", o, true)));
    return box;
  }

  function valueText(v) { return v === null || v === undefined ? "\u2014" : String(v); }

  function progress(labelled) {
    state.labelled = labelled;
    $("progress").textContent = `${labelled} / ${state.total} labelled`;
  }

  function render(v) {
    const short = v.field === "externalization_gap" ? "G" : "y";
    $("current").textContent = visible(`${index + 1}/${v.total} \u00b7 ${v.task_id} (${v.domain}) \u00b7 boundary ` +
      `b=${v.after_step} of ${v.n_steps} \u00b7 ${short} = ${valueText(v.value)}`);
    $("current").className = "value" + (v.value === null ? "none" : v.value);
    const view = document.createDocumentFragment();
    view.appendChild(piece("system", "system prompt", v.system_prompt, true));
    if (v.tools) view.appendChild(piece("tools", "tools", v.tools, true));
    view.appendChild(piece("task", "task", v.task, false));
    v.history.forEach((s) => view.appendChild(stepNode(s, false)));
    view.appendChild(el("div", "boundary", `boundary b=${v.after_step}: label ${NAMES[v.field]} here`));
    (v.later || []).forEach((s) => view.appendChild(stepNode(s, true)));
    $("view").replaceChildren(view);

    const others = $("others");
    others.hidden = !v.others.length;
    others.replaceChildren(...v.others.map((o) => el("div", null,
      `${o.annotator}: ${short} = ${valueText(o.value)}${o.note ? " \u00b7 note: " + o.note : ""}`)));

    const ev = $("evidence");
    ev.hidden = !v.evidence;
    ev.replaceChildren();
    if (v.evidence) {
      ev.appendChild(el("div", null, `rule labeler suggests ${short} = ${v.evidence.rule_label}`));
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
  }

  async function go(i) {
    index = Math.max(0, Math.min(state.total - 1, i));
    if ($("suggest").checked) say("computing the rule evidence\u2026");
    const v = await api(`/api/item/${index}?suggestions=${$("suggest").checked ? 1 : 0}`);
    progress(v.labelled);
    render(v);
    if ($("status").textContent.startsWith("computing")) say("");
    window.scrollTo(0, 0);
  }

  function say(text, error) {
    $("status").textContent = visible(text);
    $("status").className = error ? "error" : "";
  }

  async function change(kind, body) {
    const reply = await api(`/api/${kind}`, body);
    progress(reply.labelled);
    return reply;
  }

  async function handle(key) {
    if (key === "0" || key === "1") {
      const at = index;
      const reply = await change("label", {index: at, value: Number(key), suggestions: $("suggest").checked});
      say(`saved ${key} at item ${at + 1}`);
      await go(reply.index);
    } else if (key === "s") {
      const reply = await change("skip", {index});
      say(`skipped item ${index + 1}`);
      await go(reply.index);
    } else if (key === "u") {
      const reply = await change("undo", {});
      if (reply.index === null) { say("nothing to undo"); return; }
      say(`undid the label of item ${reply.index + 1}`);
      await go(reply.index);
    } else if (key === "ArrowRight" || key === "j") {
      await go(index + 1);
    } else if (key === "ArrowLeft" || key === "k") {
      await go(index - 1);
    } else if (key === "e") {
      $("suggest").checked = !$("suggest").checked;
      await go(index);
    }
  }

  function queue(work) {
    chain = chain.then(work).catch((err) => say(`error: ${err.message}`, true));
  }

  document.addEventListener("keydown", (event) => {
    if (event.target === $("note") || event.ctrlKey || event.metaKey || event.altKey || !state) return;
    if (event.key === "n") {
      event.preventDefault();
      $("note").focus();
      return;
    }
    if (["0", "1", "s", "u", "j", "k", "e", "ArrowRight", "ArrowLeft"].includes(event.key)) {
      event.preventDefault();
      queue(() => handle(event.key));
    }
  });
  $("note").addEventListener("keydown", (event) => {
    if (event.key === "Escape") { $("note").blur(); return; }
    if (event.key !== "Enter") return;
    event.preventDefault();
    const at = index;
    const text = $("note").value;
    $("note").blur();
    queue(async () => { await change("note", {index: at, note: text}); say(`note saved at item ${at + 1}`); });
  });
  $("suggest").addEventListener("change", () => queue(() => go(index)));

  queue(async () => {
    state = await api("/api/state");
    const rules = $("rules-text");
    state.fields.forEach((f) => {
      rules.appendChild(el("h4", null, NAMES[f]));
      rules.appendChild(el("pre", "rule", state.rules[f]));
    });
    if (state.mode === "adjudicate") say(`adjudicating ${state.compared.join(" vs ")}: only their disagreements`);
    await go(state.position);
  });
})();
