// CUBE in the browser: the live view, replays, and play. No build step, no outside code.
//
// The page keeps one Film per episode: the frames of the world built from the trace records
// (LLM.md section 5) as the server sends them (live) or as a trace file holds them (replay).
// Frame k is the world after k steps, with the decisions taken before step k; the last
// frame of a live film is the episode as it is now. A canvas draws a frame, panels show each
// agent's stage, plan and messages.
"use strict";

(() => {
  const STAGE_COLORS = { R: "#4C72B0", W: "#F2B701", X: "#59A14F", I: "#E15759" };
  const STAGE_NAMES = { R: "reasoning", W: "waiting", X: "executing", I: "interrupted" };
  const KIND_COLORS = { human: "#d4580b", llm: "#8250df", heuristic: "#0969da", team: "#1a7f37",
                        policy: "#9a6700", random: "#6e7781" };
  const BLOCK_COLORS = ["#d8c3a0", "#c2a172", "#a4804d", "#846236", "#634826", "#4a361c"];
  const DELTAS = [[0, 0], [-1, 0], [1, 0], [0, -1], [0, 1]];
  const KEYS = { ArrowUp: "up", ArrowDown: "down", ArrowLeft: "left", ArrowRight: "right",
                 w: "up", s: "down", a: "left", d: "right", W: "up", S: "down", A: "left", D: "right", " ": "stay" };
  const MESSAGES_SHOWN = 60;
  const SAID_PER_AGENT = 3;

  const $ = (id) => document.getElementById(id);
  const agentId = (name) => Number(name.slice(name.lastIndexOf("_") + 1));
  const byId = (a, b) => agentId(a) - agentId(b);

  // ---- the frames of one episode -------------------------------------------------------------
  class Film {
    constructor(header, gridSize) {
      this.header = header;
      this.gridSize = gridSize;
      this.names = Object.keys(header.agents).sort(byId);
      this.index = Object.fromEntries(this.names.map((n, i) => [n, i]));
      this.frames = [];
      this.live = {
        t: 0,
        agents: header.layout.agents.map((p) => p.slice()),
        blocks: header.layout.blocks.map((b) => b.slice()),
        actions: null,
        panels: this.names.map((name) => ({
          name, kind: header.agents[name].kind, model: header.agents[name].model, stage: null, plan: null,
          event: null, note: null, current: null, index: -1, said: [], calls: 0,
        })),
        messages: [],
        delivered: 0,
        end: null,
      };
      this.version = 0;
    }

    get steps() { return this.frames.length; }
    get length() { return this.frames.length + 1; }
    frame(k) { return k < this.frames.length ? this.frames[k] : this.live; }

    panel(name) { return this.live.panels[this.index[name]]; }

    push(record) {
      const s = this.live;
      this.version += 1;
      switch (record.type) {
        case "stage": {
          const p = this.panel(record.agent);
          if (p) p.stage = record.stage;
          break;
        }
        case "plan": {
          const p = this.panel(record.agent);
          if (!p) break;
          if (record.event === "committed" || record.event === "resumed") {
            if (record.event === "committed" || !p.plan || p.plan.id !== record.plan_id) {
              p.plan = { id: record.plan_id, spec: record.spec, actions: record.actions };
              p.index = -1;
              p.current = null;
            }
          }
          p.event = record.event;
          p.note = record.reason || record.note || null;
          break;
        }
        case "message": {
          const m = { t: record.t, id: record.id, sender: record.sender, recipients: record.recipients,
                      content: record.content };
          s.messages = s.messages.concat([m]);  // frames share the old list
          for (const name of [record.sender, ...record.recipients]) {
            const p = this.panel(name);
            if (p) p.said = p.said.concat([m]).slice(-SAID_PER_AGENT);
          }
          break;
        }
        case "llm": {
          const p = this.panel(record.agent);
          if (p) p.calls += 1;
          break;
        }
        case "step": {
          this.frames.push(snapshot(s));
          s.agents = record.agents;
          s.blocks = record.blocks;
          s.actions = this.names.map((n) => record.actions[n]);
          s.t = record.t + 1;
          s.delivered += record.delivered.length;
          for (const p of s.panels) {
            const current = record.symbolic[p.name];
            p.current = current;
            if (current && p.plan) {
              const from = Math.max(p.index, 0);
              const found = p.plan.actions.indexOf(current, from);
              p.index = found >= 0 ? found : p.plan.actions.indexOf(current);
            }
          }
          break;
        }
        case "end":
          s.end = record;
          break;
        default:
          break;
      }
    }
  }

  function snapshot(s) {
    return { ...s, panels: s.panels.map((p) => ({ ...p })) };
  }

  // ---- drawing the world -----------------------------------------------------------------------
  class Renderer {
    constructor(canvas) {
      this.canvas = canvas;
      this.ctx = canvas.getContext("2d");
      const ratio = window.devicePixelRatio || 1;
      this.css = canvas.clientWidth || 640;
      canvas.width = Math.round(this.css * ratio);
      canvas.height = Math.round(this.css * ratio);
    }

    draw(film, frame, mine, active) {
      const g = this.ctx;
      const size = this.canvas.width;
      const k = film.gridSize;
      const cell = size / k;
      g.setTransform(1, 0, 0, 1, 0, 0);
      g.fillStyle = "#ffffff";
      g.fillRect(0, 0, size, size);
      // the goal column, K - 1
      g.fillStyle = "#dafbe1";
      g.fillRect((k - 1) * cell, 0, cell, size);
      if (k <= 80) {
        g.strokeStyle = "#eaeef2";
        g.lineWidth = 1;
        g.beginPath();
        for (let i = 1; i < k; i++) {
          g.moveTo(i * cell, 0); g.lineTo(i * cell, size);
          g.moveTo(0, i * cell); g.lineTo(size, i * cell);
        }
        g.stroke();
      }
      g.save();
      g.translate((k - 0.5) * cell, size / 2);
      g.rotate(-Math.PI / 2);
      g.fillStyle = "#1a7f37";
      g.font = `600 ${Math.max(9, Math.min(cell * 0.45, 16))}px system-ui, sans-serif`;
      g.textAlign = "center";
      g.textBaseline = "middle";
      g.fillText("GOAL", 0, 0);
      g.restore();

      frame.blocks.forEach((b, j) => {
        const [r, c, w, alive] = b;
        if (!alive) return;
        const x = c * cell, y = r * cell, side = w * cell;
        g.fillStyle = BLOCK_COLORS[Math.min(w, BLOCK_COLORS.length) - 1];
        g.fillRect(x + 1, y + 1, side - 2, side - 2);
        g.strokeStyle = "#5a4320";
        g.lineWidth = Math.max(1, cell * 0.06);
        g.strokeRect(x + 1, y + 1, side - 2, side - 2);
        g.fillStyle = w >= 3 ? "#ffffff" : "#2b1d0c";
        g.textAlign = "center";
        g.textBaseline = "middle";
        const font = Math.max(8, Math.min(side * 0.28, cell * 0.55, 18));
        g.font = `700 ${font}px system-ui, sans-serif`;
        if (side >= 2 * font + 4) {
          g.fillText(`b${j}`, x + side / 2, y + side / 2 - font * 0.55);
          g.font = `${font * 0.85}px system-ui, sans-serif`;
          g.fillText(`w${w}`, x + side / 2, y + side / 2 + font * 0.6);
        } else {
          g.fillText(`${j}·${w}`, x + side / 2, y + side / 2);
        }
      });

      const panels = frame.panels;
      frame.agents.forEach((p, i) => {
        const [r, c] = p;
        const cx = (c + 0.5) * cell, cy = (r + 0.5) * cell, radius = cell * 0.38;
        const kind = panels[i] ? panels[i].kind : "agent";
        if (mine.has(i)) {
          g.beginPath();
          g.arc(cx, cy, cell * 0.49, 0, 2 * Math.PI);
          g.fillStyle = i === active ? "#ffd8b5" : "#ffeedd";
          g.fill();
          g.lineWidth = Math.max(1.5, cell * 0.07);
          g.strokeStyle = "#d4580b";
          g.stroke();
        }
        g.beginPath();
        g.arc(cx, cy, radius, 0, 2 * Math.PI);
        g.fillStyle = KIND_COLORS[kind] || "#57606a";
        g.fill();
        g.lineWidth = Math.max(1, cell * 0.05);
        g.strokeStyle = "#1f2328";
        g.stroke();
        g.fillStyle = "#ffffff";
        g.textAlign = "center";
        g.textBaseline = "middle";
        g.font = `700 ${Math.max(8, radius * (i >= 10 ? 0.9 : 1.1))}px system-ui, sans-serif`;
        g.fillText(String(i), cx, cy + 0.5);
        const stage = panels[i] && panels[i].stage;
        if (stage) {
          g.beginPath();
          g.arc(cx + radius * 0.85, cy - radius * 0.85, Math.max(2.5, cell * 0.11), 0, 2 * Math.PI);
          g.fillStyle = STAGE_COLORS[stage];
          g.fill();
          g.lineWidth = 1;
          g.strokeStyle = "#ffffff";
          g.stroke();
        }
        const action = frame.actions ? frame.actions[i] : 0;
        if (action > 0) {
          const [dr, dc] = DELTAS[action];
          const tipX = cx + dc * cell * 0.5, tipY = cy + dr * cell * 0.5;
          const baseX = cx + dc * cell * 0.34, baseY = cy + dr * cell * 0.34;
          g.beginPath();
          g.moveTo(tipX, tipY);
          g.lineTo(baseX - dr * cell * 0.1, baseY - dc * cell * 0.1);
          g.lineTo(baseX + dr * cell * 0.1, baseY + dc * cell * 0.1);
          g.closePath();
          g.fillStyle = "#1f2328";
          g.fill();
        }
      });
    }
  }

  // ---- the page ----------------------------------------------------------------------------------
  const params = new URLSearchParams(window.location.search);
  const app = {
    view: "live",
    ws: null,
    you: null,
    nextId: 1,
    live: { game: null, film: null, seats: {}, turns: {}, controls: { paused: false, speed: 4 }, result: null },
    replay: { film: null, name: null, k: 0, timer: null },
    mine: [],
    active: null,
    pendingKey: null,
    dirty: true,
    shown: { panels: [], messages: null, film: null },
    metrics: { ticks: 0, draws: 0, drawMs: 0, firstDraw: null, moves: [], pending: new Map() },
    lastDrawn: null,
  };
  const renderer = new Renderer($("grid"));

  // Whether the live episode has ended (its last record is in): nothing runs or waits then.
  function liveEnded() { return Boolean(app.live.film && app.live.film.live && app.live.film.live.end); }
  function currentFilm() { return app.view === "live" ? app.live.film : app.replay.film; }
  function currentFrame() {
    const film = currentFilm();
    if (!film) return null;
    return app.view === "live" ? film.live : film.frame(app.replay.k);
  }
  function mineSet() { return new Set(app.view === "live" ? app.mine.map(agentId) : []); }

  // ---- the connection ----------------------------------------------------------------------------
  function connect() {
    const scheme = window.location.protocol === "https:" ? "wss" : "ws";
    const ws = new WebSocket(`${scheme}://${window.location.host}/ws`);
    app.ws = ws;
    setBadge("connecting…", "");
    ws.onopen = () => setBadge("connected", "ok");
    ws.onclose = () => {
      setBadge("disconnected: reload the page to reconnect", "bad");
      app.live.turns = {};
      renderPlay();
    };
    ws.onmessage = (event) => {
      let message;
      try { message = JSON.parse(event.data); } catch (err) { return; }
      receive(message);
    };
  }

  function send(message) {
    if (!app.ws || app.ws.readyState !== WebSocket.OPEN) return null;
    const id = app.nextId++;
    app.ws.send(JSON.stringify({ ...message, id }));
    return id;
  }

  function setBadge(text, kind) {
    const badge = $("connection");
    badge.textContent = text;
    badge.className = `badge ${kind}`;
  }

  function receive(m) {
    switch (m.type) {
      case "welcome":
        app.you = m.you;
        app.live.controls = m.controls;
        setGame(m.game, m.records);
        app.live.result = m.result;
        app.live.turns = Object.fromEntries(m.turns.map((t) => [t.agent, t]));
        setSeats(m.seats);
        if (params.has("play")) joinFromUrl();
        break;
      case "game":
        app.live.result = null;
        app.live.turns = {};
        app.live.controls = m.controls;
        setGame(m.game, []);
        break;
      case "record":
        if (app.live.game && m.game === app.live.game.id) liveRecord(m.record);
        break;
      case "turn":
        app.live.turns[m.turn.agent] = m.turn;
        if (app.pendingKey && app.pendingKey.agent === m.turn.agent && app.mine.includes(m.turn.agent)) {
          const { agent, key, t0 } = app.pendingKey;
          app.pendingKey = null;
          sendKey(agent, key, t0);
        }
        renderPlay();
        break;
      case "turn_closed":
        delete app.live.turns[m.agent];
        renderPlay();
        break;
      case "controls":
        app.live.controls = m.controls;
        renderControls();
        break;
      case "seats":
        setSeats(m.seats);
        break;
      case "joined":
        setSeats(app.live.seats);
        break;
      case "accepted": {
        showPlayError("");
        const pending = app.metrics.pending.get(m.id);
        if (pending && app.live.film) pending.acceptedAt = app.live.film.steps;
        if (m.plan && !pending) { $("plan-text").value = ""; $("message-text").value = ""; }
        break;
      }
      case "refused":
        app.metrics.pending.delete(m.id);
        showPlayError(`${m.agent}: ${m.error}`);
        break;
      case "error":
        showPlayError(m.error);
        $("status").textContent = `error: ${m.error}`;
        break;
      case "ended":
        app.live.result = m.result;
        app.live.game.running = false;
        app.live.game.trace = m.trace;
        app.dirty = true;
        break;
      default:
        break;
    }
    app.dirty = true;
  }

  function setGame(game, records) {
    app.live.game = game;
    app.live.film = null;
    app.live.turns = app.live.turns || {};
    for (const record of records) liveRecord(record);
    renderSummary();
    $("play-panel").hidden = app.view !== "live" || game.humans.length === 0;
    renderControls();
    renderPlay();
    app.dirty = true;
  }

  function worldText(env) {
    if (env.scenario !== undefined) return `scenario ${typeof env.scenario === "string" ? env.scenario : "custom"}`;
    if (env.n !== undefined) return `n = ${env.n}`;
    return "custom world";
  }

  function teamText(agents) {
    const labels = Object.keys(agents).sort(byId).map((n) => agents[n].model ? `${agents[n].kind}:${agents[n].model}` : agents[n].kind);
    return labels.every((l) => l === labels[0]) ? labels[0] : labels.join(",");
  }

  function renderSummary() {
    let parts = [];
    if (app.view === "live" && app.live.game) {
      const game = app.live.game;
      parts = [worldText(game.env), `${game.grid_size}×${game.grid_size}`, `topology ${game.topology}`,
               `team ${game.team}`, game.seed === null ? "" : `seed ${game.seed}`];
    } else if (app.view === "replay" && app.replay.film) {
      const film = app.replay.film;
      const header = film.header;
      parts = [`replay of ${app.replay.name}`, worldText(header.env), `${film.gridSize}×${film.gridSize}`,
               `topology ${header.topology}`, `team ${teamText(header.agents)}`, `seed ${header.seed}`];
    }
    $("summary").textContent = parts.filter(Boolean).join(" · ");
  }

  function liveRecord(record) {
    if (record.type === "episode") {
      app.live.film = new Film(record, app.live.game.grid_size);
      return;
    }
    if (app.live.film) app.live.film.push(record);
    app.dirty = true;
  }

  function setSeats(seats) {
    app.live.seats = seats;
    app.mine = Object.keys(seats).filter((name) => seats[name] === app.you).sort(byId);
    if (!app.mine.includes(app.active)) app.active = app.mine.length ? app.mine[0] : null;
    renderPlay();
    app.dirty = true;
  }

  function joinFromUrl() {
    const wanted = params.get("play");
    const free = Object.keys(app.live.seats).filter((n) => app.live.seats[n] === null);
    const agents = wanted === "" || wanted === "all" ? free : wanted.split(",").filter((n) => n);
    if (agents.length) send({ type: "join", agents });
    params.delete("play");
  }

  // ---- play --------------------------------------------------------------------------------------
  function sendKey(agent, key, t0) {
    const id = send({ type: "key", agent, key });
    if (id !== null) app.metrics.pending.set(id, { agent, key, t0, acceptedAt: null });
  }

  function pressKey(key) {
    const agent = app.active;
    if (!agent) return;
    const t0 = performance.now();
    if (app.live.turns[agent]) {
      sendKey(agent, key, t0);
    } else {
      app.pendingKey = { agent, key, t0 };  // sent when the agent's turn opens
      showPlayError("");
      renderPlay();
    }
  }

  function outgoingMessages() {
    const text = $("message-text").value.trim();
    if (!text) return [];
    const to = [...document.querySelectorAll("#recipients input:checked")].map((box) => box.value);
    return [{ to: to.length ? to : ["all"], content: text }];
  }

  function showPlayError(text) { $("play-error").textContent = text; }

  function renderPlay() {
    const game = app.live.game;
    const panel = $("play-panel");
    panel.hidden = app.view !== "live" || !game || game.humans.length === 0;
    if (panel.hidden) return;
    const seats = $("seats");
    seats.replaceChildren();
    for (const name of game.humans) {
      const holder = app.live.seats[name];
      const button = document.createElement("button");
      button.dataset.agent = name;
      if (holder === app.you) {
        button.textContent = `${name} (you${name === app.active ? ", keys" : ""})`;
        button.className = name === app.active ? "on" : "";
        button.onclick = () => { app.active = name; renderPlay(); app.dirty = true; };
      } else if (holder === null || holder === undefined) {
        button.textContent = `Play ${name}`;
        button.onclick = () => send({ type: "join", agents: [name] });
      } else {
        button.textContent = `${name}: another person`;
        button.disabled = true;
      }
      seats.appendChild(button);
    }
    const turnBox = $("turn");
    const agent = app.active;
    const turn = agent ? app.live.turns[agent] : null;
    turnBox.className = turn ? "turn open" : "turn";
    const lines = [];
    if (!agent) {
      lines.push("Take a seat to play.");
    } else if (turn) {
      const what = { plan: "commit a plan (a key, or a typed plan)", interrupt: "a message arrived: resume or replan",
                     message: "send a message" }[turn.purpose];
      lines.push(`${agent}, your turn at t = ${turn.t}: ${what}.`);
      if (turn.instructions) lines.push(turn.instructions);
      if (turn.feedback) lines.push(`feedback: ${turn.feedback}`);
      for (const m of turn.inbox) lines.push(`from ${m.sender}: ${m.content}`);
      lines.push(turn.may_send ? `you may send ${turn.budget} message(s) to ${turn.recipients.join(", ")}`
                               : "no message may be sent now");
    } else if (liveEnded()) {
      const end = app.live.film.live.end;
      lines.push(`The episode has ended (${end.terminated ? "terminated" : "truncated"}): ${end.reason}.`);
      lines.push("Start a new episode to play again.");
    } else {
      const film = app.live.film;
      const p = film ? film.live.panels[agentId(agent)] : null;
      lines.push(`${agent} is ${p && p.stage ? STAGE_NAMES[p.stage] : "waiting for the episode"}` +
                 (p && p.plan && p.stage === "X" ? `: ${p.plan.spec}` : "") + ".");
      if (app.pendingKey && app.pendingKey.agent === agent) lines.push(`next move: ${app.pendingKey.key}`);
    }
    turnBox.textContent = lines.join("\n");
    $("resume").disabled = !(turn && turn.purpose === "interrupt");
    $("say").disabled = !(turn && turn.purpose === "message");
    $("send-plan").disabled = !(turn && turn.purpose !== "message");
    const recipients = $("recipients");
    const names = turn && turn.may_send ? turn.recipients : [];
    if (recipients.dataset.names !== names.join(",")) {
      recipients.dataset.names = names.join(",");
      recipients.replaceChildren();
      for (const name of names) {
        const label = document.createElement("label");
        const box = document.createElement("input");
        box.type = "checkbox";
        box.value = name;
        label.append(box, ` ${name}`);
        recipients.appendChild(label);
      }
    }
  }

  // ---- panels -------------------------------------------------------------------------------------
  function renderPanels(film, frame) {
    const box = $("agents");
    if (app.shown.film !== film) {
      box.replaceChildren();
      app.shown.panels = [];
      app.shown.film = film;
      app.shown.messages = null;
    }
    if (!film) return;
    const mine = mineSet();
    frame.panels.forEach((p, i) => {
      const key = [p.stage, p.plan && p.plan.id, p.event, p.note, p.index, p.current, p.said.length,
                   p.said.length && p.said[p.said.length - 1].id, p.calls, mine.has(i)].join("|");
      let card = box.children[i];
      if (!card) {
        card = document.createElement("article");
        card.className = "agent";
        box.appendChild(card);
      }
      if (app.shown.panels[i] === key) return;
      app.shown.panels[i] = key;
      card.className = mine.has(i) ? "agent mine" : "agent";
      card.replaceChildren();
      const head = document.createElement("header");
      const stage = document.createElement("span");
      stage.className = `stage ${p.stage || ""}`;
      stage.textContent = p.stage || "·";
      stage.title = STAGE_NAMES[p.stage] || "";
      const name = document.createElement("span");
      name.className = "name";
      name.textContent = p.name + (mine.has(i) ? " (you)" : "");
      const kind = document.createElement("span");
      kind.className = "kind";
      kind.textContent = p.model ? `${p.kind} · ${p.model}` : p.kind;
      head.append(stage, name, kind);
      if (p.calls) {
        const calls = document.createElement("span");
        calls.className = "kind";
        calls.textContent = `· ${p.calls} call${p.calls === 1 ? "" : "s"}`;
        head.append(calls);
      }
      card.appendChild(head);
      if (p.plan) {
        const spec = document.createElement("div");
        spec.className = "spec";
        spec.textContent = `plan #${p.plan.id}: ${p.plan.spec}`;
        if (p.event && p.event !== "committed") {
          const event = document.createElement("span");
          event.className = "event";
          event.textContent = ` (${p.event}${p.note ? `: ${p.note}` : ""})`;
          spec.appendChild(event);
        }
        card.appendChild(spec);
        const list = document.createElement("ol");
        list.start = 0;
        p.plan.actions.slice(0, 12).forEach((text, j) => {
          const item = document.createElement("li");
          item.textContent = text;
          const over = p.event && p.event !== "committed" && p.event !== "resumed";
          if (j === p.index && p.current && !over) item.className = "current";
          else if (j < p.index || (over && j <= p.index)) item.className = "done";
          list.appendChild(item);
        });
        card.appendChild(list);
      }
      for (const m of p.said) {
        const said = document.createElement("div");
        said.className = "said";
        said.textContent = m.sender === p.name ? `→ ${m.recipients.join(", ")}: ${m.content}` : `${m.sender} →: ${m.content}`;
        card.appendChild(said);
      }
    });
    if (app.shown.messages !== frame.messages) {
      app.shown.messages = frame.messages;
      const list = $("messages");
      list.replaceChildren();
      for (const m of frame.messages.slice(-MESSAGES_SHOWN)) {
        const item = document.createElement("li");
        item.textContent = `t=${m.t} ${m.sender} → ${m.recipients.join(", ")}: ${m.content}`;
        list.appendChild(item);
      }
      list.scrollTop = list.scrollHeight;
    }
  }

  function renderControls() {
    const c = app.live.controls || {};
    $("pause").className = c.paused ? "on" : "";
    $("run").className = c.paused ? "" : "on";
    const speed = $("speed");
    const value = String(c.speed);
    if ([...speed.options].some((o) => o.value === value)) speed.value = value;
  }

  function renderStatus(film, frame) {
    const status = $("status");
    if (!film) {
      status.textContent = app.view === "live" ? "waiting for the episode…" : "open a recorded episode";
      status.className = "status";
      return;
    }
    const blocks = frame.blocks.length;
    const delivered = frame.blocks.filter((b) => !b[3]).length;
    const parts = [`t = ${frame.t}`, `blocks delivered ${delivered}/${blocks}`];
    if (app.view === "live") {
      const game = app.live.game;
      parts[0] += ` / ${game.max_steps}`;
      const c = app.live.controls || {};
      const people = Object.keys(app.live.turns || {});
      if (!frame.end && people.length) {
        parts.push(`waiting for the person at ${people.join(", ")}`);
      } else if (!frame.end) {
        parts.push(c.paused ? "paused" : `running at ${c.speed === "max" ? "full speed" : `${c.speed} steps/s`}`);
      }
    } else {
      parts[0] = `${app.replay.name}: t = ${app.replay.k} / ${film.length - 1}`;
    }
    if (frame.end) {
      parts.push(`ended (${frame.end.terminated ? "terminated" : "truncated"}): ${frame.end.reason}`);
    }
    status.textContent = parts.join(" · ");
    status.className = frame.end ? "status ended" : "status";
    $("open-replay").hidden = !(app.view === "live" && frame.end && app.live.game && app.live.game.trace);
  }

  // ---- the drawing loop ---------------------------------------------------------------------------
  function tick(now) {
    app.metrics.ticks += 1;
    if (app.dirty) {
      app.dirty = false;
      const film = currentFilm();
      const frame = currentFrame();
      const started = performance.now();
      if (film && frame) {
        const mine = mineSet();
        renderer.draw(film, frame, mine, app.active === null ? -1 : agentId(app.active));
        app.lastDrawn = { view: app.view, t: frame.t, steps: film.steps, agents: frame.agents.map((p) => p.slice()),
                          blocks: frame.blocks.map((b) => b.slice()), ended: Boolean(frame.end),
                          stages: frame.panels.map((p) => p.stage), grid: film.gridSize };
        if (app.metrics.firstDraw === null) app.metrics.firstDraw = performance.now();
        if (app.view === "live") settleMoves(film);
      }
      renderPanels(film, frame);
      renderStatus(film, frame);
      if (app.view === "live") renderPlay();
      app.metrics.draws += 1;
      app.metrics.drawMs += performance.now() - started;
      if (app.view === "replay") syncScrub();
    }
    window.requestAnimationFrame(tick);
  }

  function settleMoves(film) {
    for (const [id, move] of app.metrics.pending) {
      if (move.acceptedAt !== null && film.steps > move.acceptedAt) {
        app.metrics.moves.push({ agent: move.agent, key: move.key, ms: performance.now() - move.t0 });
        app.metrics.pending.delete(id);
      }
    }
  }

  // ---- replay ---------------------------------------------------------------------------------------
  async function listTraces() {
    const select = $("trace-list");
    try {
      const response = await fetch("/api/traces");
      const data = await response.json();
      select.replaceChildren();
      for (const entry of data.traces) {
        const option = document.createElement("option");
        option.value = entry.name;
        option.textContent = entry.name;
        select.appendChild(option);
      }
    } catch (err) {
      $("replay-error").textContent = `could not list the traces: ${err}`;
    }
  }

  // The trace list shows which trace is open: selected, marked, and named above the list.
  function markOpenTrace(name) {
    const select = $("trace-list");
    for (const option of select.options) {
      option.textContent = option.value === name ? `▶ ${option.value} (open)` : option.value;
    }
    if ([...select.options].some((o) => o.value === name)) select.value = name;
    $("open-trace").textContent = `open: ${name}`;
  }

  function openReplay(payload) {
    const records = payload.records;
    const film = new Film(records[0], payload.grid_size);
    for (const record of records.slice(1)) film.push(record);
    stopReplay();
    app.replay.film = film;
    app.replay.name = payload.name;
    app.replay.k = 0;
    $("scrub").max = String(film.length - 1);
    markOpenTrace(payload.name);
    const picture = $("timeline");
    picture.classList.remove("enlarged");
    if (payload.timeline) {
      picture.src = payload.timeline;
      picture.hidden = false;
    } else {
      picture.hidden = true;
    }
    $("replay-error").textContent = payload.grid_inferred ? "grid size inferred from the positions" : "";
    renderSummary();
    app.dirty = true;
  }

  async function loadTrace(name) {
    $("replay-error").textContent = "loading…";
    const response = await fetch(`/api/trace?name=${encodeURIComponent(name)}`);
    const data = await response.json();
    if (!response.ok) { $("replay-error").textContent = data.error; return; }
    openReplay(data);
  }

  async function uploadTrace(file) {
    $("replay-error").textContent = "loading…";
    const text = await file.text();
    const response = await fetch(`/api/replay?name=${encodeURIComponent(file.name)}`, { method: "POST", body: text });
    const data = await response.json();
    if (!response.ok) { $("replay-error").textContent = data.error; return; }
    openReplay(data);
  }

  function seek(k) {
    const film = app.replay.film;
    if (!film) return;
    app.replay.k = Math.max(0, Math.min(film.length - 1, k));
    app.dirty = true;
  }

  function syncScrub() {
    $("scrub").value = String(app.replay.k);
    const film = app.replay.film;
    $("scrub-label").textContent = film ? `t = ${app.replay.k} / ${film.length - 1}` : "t = 0 / 0";
  }

  function stopReplay() {
    if (app.replay.timer !== null) clearInterval(app.replay.timer);
    app.replay.timer = null;
    $("play").textContent = "Play";
  }

  function toggleReplay() {
    if (app.replay.timer !== null) { stopReplay(); return; }
    const film = app.replay.film;
    if (!film) return;
    if (app.replay.k >= film.length - 1) seek(0);
    $("play").textContent = "Pause";
    app.replay.timer = setInterval(() => {
      if (app.replay.k >= film.length - 1) { stopReplay(); return; }
      seek(app.replay.k + 1);
    }, 1000 / 8);
  }

  function setView(view) {
    app.view = view;
    for (const tab of document.querySelectorAll(".tab")) tab.classList.toggle("active", tab.dataset.view === view);
    $("live-controls").hidden = view !== "live";
    $("replay-controls").hidden = view !== "replay";
    $("replay-source").hidden = view !== "replay";
    if (view === "replay") listTraces();
    else stopReplay();
    renderSummary();
    renderPlay();
    app.dirty = true;
  }

  // ---- wiring --------------------------------------------------------------------------------------
  function wire() {
    for (const tab of document.querySelectorAll(".tab")) tab.onclick = () => setView(tab.dataset.view);
    $("pause").onclick = () => send({ type: "pause" });
    $("step").onclick = () => send({ type: "step" });
    $("run").onclick = () => {
      const value = $("speed").value;
      send({ type: "run", speed: value === "max" ? "max" : Number(value) });
    };
    $("speed").onchange = () => {
      const value = $("speed").value;
      send({ type: "speed", speed: value === "max" ? "max" : Number(value) });
    };
    $("new-episode").onclick = () => send({ type: "new_episode" });
    $("open-replay").onclick = async () => {
      const trace = app.live.game && app.live.game.trace;
      setView("replay");
      if (trace) await loadTrace(trace);
    };
    $("plan-form").onsubmit = (event) => {
      event.preventDefault();
      if (!app.active) { showPlayError("take a seat first"); return; }
      const plan = $("plan-text").value.trim();
      if (!plan) { showPlayError("type a plan, e.g. move_to_block(0, left); push_block(0, 5)"); return; }
      const spec = $("plan-spec").value.trim();
      const message = { type: "plan", agent: app.active, plan, messages: outgoingMessages() };
      if (spec) message.spec = spec;
      send(message);
    };
    $("resume").onclick = () => app.active && send({ type: "resume", agent: app.active, messages: outgoingMessages() });
    $("say").onclick = () => {
      const messages = outgoingMessages();
      if (!messages.length) { showPlayError("type a message first"); return; }
      send({ type: "say", agent: app.active, messages });
    };
    $("timeline").onclick = () => $("timeline").classList.toggle("enlarged");
    $("load-trace").onclick = () => { const name = $("trace-list").value; if (name) loadTrace(name); };
    $("trace-file").onchange = (event) => { const file = event.target.files[0]; if (file) uploadTrace(file); };
    $("first").onclick = () => seek(0);
    $("back").onclick = () => seek(app.replay.k - 1);
    $("forward").onclick = () => seek(app.replay.k + 1);
    $("last").onclick = () => { const film = app.replay.film; if (film) seek(film.length - 1); };
    $("play").onclick = toggleReplay;
    $("scrub").oninput = () => seek(Number($("scrub").value));
    document.addEventListener("keydown", onKey);
  }

  function onKey(event) {
    const target = event.target;
    if (target && (target.tagName === "INPUT" || target.tagName === "TEXTAREA" || target.tagName === "SELECT")) return;
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    if (app.view === "replay") {
      const moves = { ArrowLeft: -1, ArrowRight: 1 };
      if (event.key in moves) seek(app.replay.k + moves[event.key]);
      else if (event.key === "Home") seek(0);
      else if (event.key === "End" && app.replay.film) seek(app.replay.film.length - 1);
      else if (event.key === " ") toggleReplay();
      else return;
      event.preventDefault();
      return;
    }
    if (/^[1-9]$/.test(event.key) && app.mine.length) {
      const pick = app.mine[Number(event.key) - 1];
      if (pick) { app.active = pick; renderPlay(); app.dirty = true; }
      event.preventDefault();
      return;
    }
    const key = KEYS[event.key];
    if (key && app.active) {
      event.preventDefault();
      pressKey(key);
      return;
    }
    if (event.key === "p") send({ type: "pause" });
    else if (event.key === "n") send({ type: "step" });
    else if (event.key === "r") $("run").onclick();
  }

  // What tests and measurements read: the drawn state and the page's counters.
  window.cube = {
    app,
    drawn: () => app.lastDrawn,
    metrics: () => ({ ticks: app.metrics.ticks, draws: app.metrics.draws, drawMs: app.metrics.drawMs,
                      firstDraw: app.metrics.firstDraw, moves: app.metrics.moves.slice() }),
    replay: () => ({ name: app.replay.name, k: app.replay.k, last: app.replay.film ? app.replay.film.length - 1 : null }),
    openTrace: loadTrace,
  };

  wire();
  setView(params.get("view") === "replay" ? "replay" : "live");
  connect();
  window.requestAnimationFrame(tick);
})();
