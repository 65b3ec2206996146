// rhea serve page. The server is stateless: this page keeps the message list and sends all of it
// on each turn to POST /v1/chat/completions with "rhea": true; the reply's "rhea" object (the
// context the policy built for that turn) fills the Memory panel. Nothing loads from the network.
"use strict";
(function () {
  const $ = (id) => document.getElementById(id);
  const el = {
    model: $("model"), stream: $("stream"), reset: $("reset"), status: $("status"), log: $("log"),
    error: $("error"), form: $("composer"), input: $("input"), send: $("send"), memory: $("memory"),
    memoryEmpty: $("memory-empty"), memoryBody: $("memory-body"), policy: $("policy"), memoryTurn: $("memory-turn"),
    fed: $("tokens-fed"), full: $("tokens-full"), saved: $("tokens-saved"), savedPct: $("tokens-saved-pct"),
    bar: $("tokens-bar"), barFed: $("tokens-bar-fed"), instructions: $("instructions"),
    instructionsEmpty: $("instructions-empty"), turnsBody: $("turns-body"), turnsEmpty: $("turns-empty"),
  };
  // the library's plans name a left-out turn "drop"; the page shows the tier words raw / latent / dropped
  const TIER_ALIASES = { drop: "dropped" };
  const messages = [];       // [{role, content}] sent whole on every request
  let busy = false;

  function setState(state, text) {
    document.body.dataset.state = state;      // loading | idle | busy | error (read by the browser test)
    if (text !== undefined) el.status.textContent = text;
    el.send.disabled = state === "busy" || state === "loading";
  }

  function showError(message) {
    el.error.textContent = message;
    el.error.hidden = false;
  }
  function clearError() { el.error.hidden = true; el.error.textContent = ""; }

  // {"error": {"message", "type", "param", "code"}} -> one readable line
  function errorText(body, httpStatus) {
    const e = body && body.error;
    if (e && typeof e === "object" && e.message) {
      const where = e.param ? ` (parameter: ${e.param})` : "";
      const kind = e.type || e.code ? ` [${[e.type, e.code].filter(Boolean).join(", ")}]` : "";
      return `${e.message}${where}${kind}`;
    }
    if (typeof e === "string") return e;
    return httpStatus ? `The server answered HTTP ${httpStatus} without an error message.` : "Unknown error.";
  }

  async function readError(res) {
    const text = await res.text();
    try { return errorText(JSON.parse(text), res.status); }
    catch (_) { return `HTTP ${res.status}: ${text.slice(0, 300) || res.statusText}`; }
  }

  function addBubble(role, text) {
    const li = document.createElement("li");
    li.className = `msg msg-${role}`;
    li.dataset.role = role;
    const who = document.createElement("span");
    who.className = "who";
    who.textContent = role === "user" ? "You" : "Assistant";
    const body = document.createElement("span");
    body.className = "text";
    body.textContent = text;
    li.append(who, body);
    el.log.append(li);
    el.log.scrollTop = el.log.scrollHeight;
    return li;
  }

  function firstWords(text, n) {
    const words = String(text || "").trim().split(/\s+/).filter(Boolean);
    return words.length <= n ? words.join(" ") : words.slice(0, n).join(" ") + " …";
  }

  function num(x) { return typeof x === "number" && isFinite(x) ? x : null; }
  function fmtInt(x) { return num(x) === null ? "—" : x.toLocaleString("en-US"); }

  function renderMemory(rhea, userTurn) {
    el.memory.dataset.updates = String(Number(el.memory.dataset.updates || 0) + 1);
    el.memoryEmpty.hidden = true;
    el.memoryBody.hidden = false;
    if (!rhea || typeof rhea !== "object") {
      el.memoryEmpty.hidden = false;
      el.memoryEmpty.textContent = "The server returned no \"rhea\" object for this reply.";
      el.memoryBody.hidden = true;
      return;
    }
    el.policy.textContent = rhea.policy || "—";
    el.memoryTurn.textContent = `reply to message ${userTurn}`;

    const fed = num(rhea.tokens_fed), full = num(rhea.tokens_full_history), saved = num(rhea.tokens_saved);
    el.fed.textContent = fmtInt(fed);
    el.full.textContent = fmtInt(full);
    el.saved.textContent = fmtInt(saved);
    const pct = full && saved !== null ? (100 * saved) / full : null;
    el.savedPct.textContent = pct === null ? "—" : `${pct.toFixed(1)}%`;
    el.savedPct.dataset.value = pct === null ? "" : String(pct);
    const fedShare = full && fed !== null ? Math.max(0, Math.min(1, fed / full)) : 0;
    el.barFed.style.width = `${(100 * fedShare).toFixed(1)}%`;
    el.bar.setAttribute("aria-label", `${fmtInt(fed)} of ${fmtInt(full)} history tokens fed to the model`);

    el.instructions.replaceChildren();
    const instructions = Array.isArray(rhea.instructions) ? rhea.instructions : [];
    instructions.forEach((text, i) => {
      const li = document.createElement("li");
      li.dataset.instructionIndex = String(i);
      li.textContent = text;
      el.instructions.append(li);
    });
    el.instructionsEmpty.hidden = instructions.length > 0;

    el.turnsBody.replaceChildren();
    const turns = Array.isArray(rhea.turns) ? rhea.turns : [];
    for (const t of turns) {
      const tr = document.createElement("tr");
      const tier = TIER_ALIASES[t.tier] || String(t.tier || "unknown");
      const score = num(t.score);
      tr.dataset.turnIndex = String(t.index);
      tr.dataset.tier = tier;                 // raw | latent | dropped (read by the browser test)
      tr.dataset.score = score === null ? "" : String(score);

      const tdIndex = document.createElement("td");
      tdIndex.className = "num";
      tdIndex.textContent = String(t.index);
      const tdUser = document.createElement("td");
      tdUser.className = "user";
      tdUser.textContent = firstWords(t.user, 8);
      tdUser.title = String(t.user || "");
      const tdTier = document.createElement("td");
      const badge = document.createElement("span");
      badge.className = `tier tier-${/^(raw|latent|dropped)$/.test(tier) ? tier : "unknown"}`;
      badge.textContent = tier;
      tdTier.append(badge);
      const tdScore = document.createElement("td");
      tdScore.className = "num score";
      tdScore.textContent = score === null ? "—" : score.toFixed(3);
      const comps = t.components && typeof t.components === "object" ? Object.entries(t.components) : [];
      if (comps.length) {
        tdScore.title = comps.map(([k, v]) => `${k}: ${num(v) === null ? v : v.toFixed(3)}`).join("\n");
      }
      tr.append(tdIndex, tdUser, tdTier, tdScore);
      el.turnsBody.append(tr);
    }
    el.turnsEmpty.hidden = turns.length > 0;
  }

  // Server-sent events: "data: {...}" blocks separated by a blank line, ending with "data: [DONE]".
  async function readStream(res, onDelta) {
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "", rhea = null, done = false;
    const handle = (block) => {
      const data = block.split(/\r?\n/).filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trimStart()).join("\n");
      if (!data) return;
      if (data === "[DONE]") { done = true; return; }
      let chunk;
      try { chunk = JSON.parse(data); } catch (_) { throw new Error(`The server sent an unreadable stream chunk: ${data.slice(0, 200)}`); }
      if (chunk.error) throw new Error(errorText(chunk));
      const choice = chunk.choices && chunk.choices[0];
      const piece = choice && choice.delta && choice.delta.content;
      if (piece) onDelta(piece);
      if (chunk.rhea) rhea = chunk.rhea;
    };
    while (!done) {
      const { value, done: eof } = await reader.read();
      if (value) buffer += decoder.decode(value, { stream: true });
      let cut;
      while (!done && (cut = buffer.search(/\r?\n\r?\n/)) >= 0) {
        const block = buffer.slice(0, cut);
        buffer = buffer.slice(cut).replace(/^\r?\n\r?\n/, "");
        handle(block);
      }
      if (eof) { if (!done && buffer.trim()) handle(buffer); break; }
    }
    if (!done) throw new Error("The reply stream ended before its end marker ([DONE]); the reply may be incomplete.");
    return rhea;
  }

  async function send(text) {
    if (busy) return;
    if (!el.model.value) { showError("No model to talk to: GET /v1/models listed none."); return; }
    busy = true;
    clearError();
    messages.push({ role: "user", content: text });
    const userTurn = messages.filter((m) => m.role === "user").length;
    const userBubble = addBubble("user", text);
    const bot = addBubble("assistant", "");
    bot.classList.add("pending");
    const botText = bot.querySelector(".text");
    const stream = el.stream.checked;
    setState("busy", "Waiting for the reply…");
    try {
      const res = await fetch("/v1/chat/completions", {
        method: "POST",
        headers: { "Content-Type": "application/json", Accept: stream ? "text/event-stream" : "application/json" },
        body: JSON.stringify({ model: el.model.value, messages, stream, rhea: true }),
      });
      if (!res.ok) throw new Error(await readError(res));
      let reply = "", rhea = null;
      if (stream) {
        rhea = await readStream(res, (piece) => {
          reply += piece;
          botText.textContent = reply;
          el.log.scrollTop = el.log.scrollHeight;
        });
      } else {
        const body = await res.json();
        if (body.error) throw new Error(errorText(body));
        const choice = body.choices && body.choices[0];
        reply = (choice && choice.message && choice.message.content) || "";
        rhea = body.rhea || null;
      }
      botText.textContent = reply;
      bot.classList.remove("pending");
      if (!reply.trim()) {
        // kept as sent back; the server may refuse an empty assistant message on the next turn
        botText.textContent = "(the model returned an empty reply)";
        botText.classList.add("empty");
      }
      messages.push({ role: "assistant", content: reply });
      if (rhea) {
        const meta = document.createElement("span");
        meta.className = "meta";
        meta.textContent = `${fmtInt(num(rhea.tokens_fed))} of ${fmtInt(num(rhea.tokens_full_history))} tokens fed · ${rhea.policy || ""}`;
        bot.append(meta);
      }
      renderMemory(rhea, userTurn);
      setState("idle", `Replied (${messages.length} messages in this conversation).`);
    } catch (err) {
      messages.pop();                         // not answered: the server never saw it as a turn
      bot.remove();
      userBubble.classList.add("msg-failed");
      userBubble.dataset.failed = "true";
      if (!el.input.value) el.input.value = text;
      const msg = err instanceof TypeError ? `Could not reach the server: ${err.message}` : err.message;
      showError(msg);
      setState("error", "The last message was not answered; it is back in the input box.");
    } finally {
      busy = false;
      el.send.disabled = false;
      el.input.focus();
    }
  }

  el.form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const text = el.input.value.trim();
    if (!text) return;
    el.input.value = "";
    send(text);
  });
  el.input.addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) { ev.preventDefault(); el.form.requestSubmit(); }
  });
  el.reset.addEventListener("click", () => {
    if (busy) return;
    messages.length = 0;
    el.log.replaceChildren();
    clearError();
    el.memoryBody.hidden = true;
    el.memoryEmpty.hidden = false;
    el.memoryEmpty.textContent = "Send a message: the context the model was given for the last turn appears here.";
    setState("idle", "New conversation.");
  });

  async function loadModels() {
    setState("loading", "Loading the model list…");
    try {
      const res = await fetch("/v1/models", { headers: { Accept: "application/json" } });
      if (!res.ok) throw new Error(await readError(res));
      const body = await res.json();
      const ids = (body.data || []).map((m) => m.id).filter(Boolean);
      el.model.replaceChildren(...ids.map((id) => new Option(id, id)));
      if (!ids.length) throw new Error("The server lists no model (GET /v1/models returned none).");
      setState("idle", `Ready: ${ids[0]}${ids.length > 1 ? ` (+${ids.length - 1})` : ""}`);
    } catch (err) {
      showError(err instanceof TypeError ? `Could not reach the server: ${err.message}` : err.message);
      setState("error", "Not connected.");
      el.send.disabled = true;
    }
  }

  loadModels();
})();
