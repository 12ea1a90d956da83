// The memory board: reads the user's memories from the bot, lets them drag, edit, pin, archive and forget.
// Who is asking is Telegram's signed init data, sent with every request; the server decides the rest.
"use strict";

const tg = window.Telegram && window.Telegram.WebApp;
const api = location.pathname.replace(/\/$/, "") + "/api";
const POLL_MS = 4000;
const state = { scope: new URLSearchParams(location.search).get("scope") || "private", version: null,
  data: null, query: "", open: null, busy: false, dragging: false };
const $ = (id) => document.getElementById(id);

function toast(text) {
  const box = $("toast");
  box.textContent = text;
  box.hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { box.hidden = true; }, 2500);
}

async function call(path, body) {
  const headers = { Authorization: "tma " + (tg ? tg.initData : "") };
  const init = body === undefined ? { headers } : {
    method: "POST", headers: { ...headers, "Content-Type": "application/json" }, body: JSON.stringify(body) };
  const response = await fetch(api + path, init);
  const answer = await response.json().catch(() => ({}));
  if (!response.ok) {
    const said = { 401: "登录已过期，请关掉面板重新打开", 403: "这条记忆不属于你", 429: "操作太快了，稍等一下" };
    throw new Error(said[response.status] || "暂时连不上，稍后再试");
  }
  return answer;
}

async function load(force) {
  const params = new URLSearchParams({ scope: state.scope });
  if (state.query) params.set("q", state.query);
  if (!force && state.version !== null && !state.query) params.set("since", String(state.version));
  const answer = await call("/board?" + params);
  if (answer.unchanged) return;
  state.data = answer;
  state.version = answer.version;
  render();
}

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value);
  }
  for (const child of children) if (child !== null && child !== undefined) node.append(child);
  return node;
}

function render() {
  const data = state.data;
  const select = $("scope");
  select.replaceChildren(...data.scopes.map((s) => el("option", { value: s.key }, s.name)));
  select.value = data.scope;
  const board = $("board");
  board.replaceChildren(...data.columns.map((column) => {
    const cards = data.cards.filter((c) => c.column === column.key);
    return el("section", { class: "column", "data-column": column.key, "aria-label": column.name },
      el("h2", {}, column.name, el("span", { class: "count" }, String(column.count))),
      ...cards.map((c) => cardOf(c, data.columns)));
  }));
  $("empty").hidden = data.cards.length > 0 || Boolean(data.query);
}

function cardOf(c, columns) {
  const badges = [c.due ? el("span", { class: "badge due" }, "待回顾") : null,
    c.followup ? el("span", { class: "badge followup" }, "待问候") : null,
    c.pinned ? el("span", { class: "badge" }, "置顶") : null];
  const meta = el("div", { class: "meta" }, el("span", {}, c.learned + "记下"), el("span", {}, c.source),
    el("span", {}, "重要 " + c.importance), c.fades ? el("span", {}, c.fades + "后淡忘") : null);
  const node = el("article", { class: "card" + (state.open === c.id ? " open" : ""), tabindex: "0",
    "data-id": String(c.id), "aria-label": c.text },
    el("p", { class: "words" }, ...badges, c.text), meta, actionsOf(c, columns));
  node.style.setProperty("--strength", String(c.strength));  // CSSOM: the page's CSP allows no inline styles
  node.addEventListener("click", (event) => {
    if (event.target.closest("button") || node.dataset.dragged) return;
    state.open = state.open === c.id ? null : c.id;
    render();
  });
  node.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && event.target === node) { state.open = state.open === c.id ? null : c.id; render(); }
  });
  node.addEventListener("pointerdown", (event) => startDrag(event, node, c));
  return node;
}

function actionsOf(c, columns) {
  const button = (label, run, kind) => el("button", { type: "button", class: kind || "", onclick: run }, label);
  const moves = columns.filter((col) => col.key !== c.column && col.key !== "archived")
    .map((col) => button("移到" + col.name, () => change(c, "move", col.key), "quiet"));
  return el("div", { class: "actions" }, ...moves,
    button("编辑", () => edit(c)),
    button(c.pinned ? "取消置顶" : "置顶", () => change(c, "pin", !c.pinned), "quiet"),
    c.followup ? button("别再提", () => change(c, "quiet"), "quiet") : null,
    c.column === "archived" ? button("恢复", () => change(c, "restore")) : button("归档", () => change(c, "move", "archived"), "quiet"),
    button("忘掉", () => forget(c), "danger"));
}

async function act(run, done) {
  if (state.busy) return;
  state.busy = true;
  try {
    await run();
    if (done) toast(done);
    await load(true);
  } catch (error) {
    toast(error.message);
  } finally {
    state.busy = false;
  }
}

function change(c, action, value) {
  const said = { move: "已移动", pin: value ? "已置顶" : "已取消置顶", quiet: "以后不再主动问起", restore: "已恢复" };
  return act(() => call("/change", { scope: state.scope, id: c.id, action, value }),
    action === "move" && value === "archived" ? "已归档" : said[action]);
}

function edit(c) {
  const dialog = $("editor");
  $("words").value = c.text;
  dialog.returnValue = "";
  dialog.onclose = () => {
    const words = $("words").value.trim();
    if (dialog.returnValue === "save" && words && words !== c.text) {
      act(() => call("/change", { scope: state.scope, id: c.id, action: "edit", value: words }), "已改好");
    }
  };
  dialog.showModal();
}

function confirmed(text) {
  return new Promise((resolve) => {
    if (tg && tg.showConfirm) tg.showConfirm(text, resolve);
    else resolve(window.confirm(text));
  });
}

async function forget(c) {
  if (await confirmed("忘掉这条记忆？忘掉后不能恢复：" + c.text)) {
    await act(() => call("/forget", { scope: state.scope, id: c.id }), "已忘掉");
  }
}

// Dragging with pointer events: they work with a finger, a mouse and a pen alike (HTML5 drag does not on phones).
function startDrag(event, node, c) {
  if (event.button !== 0 || event.target.closest("button")) return;
  const start = { x: event.clientX, y: event.clientY };
  let ghost = null;
  const columnAt = (x, y) => {
    const under = document.elementFromPoint(x, y);
    return under ? under.closest(".column") : null;
  };
  const move = (e) => {
    if (!ghost && Math.hypot(e.clientX - start.x, e.clientY - start.y) < 8) return;
    if (!ghost) {
      state.dragging = true;
      ghost = node.cloneNode(true);
      ghost.classList.add("ghost");
      document.body.append(ghost);
      node.classList.add("dragging");
      node.dataset.dragged = "1";
    }
    e.preventDefault();
    ghost.style.left = e.clientX - 40 + "px";
    ghost.style.top = e.clientY - 20 + "px";
    document.querySelectorAll(".column.over").forEach((col) => col.classList.remove("over"));
    const over = columnAt(e.clientX, e.clientY);
    if (over) over.classList.add("over");
  };
  const up = (e) => {
    document.removeEventListener("pointermove", move);
    document.removeEventListener("pointerup", up);
    document.querySelectorAll(".column.over").forEach((col) => col.classList.remove("over"));
    state.dragging = false;
    if (!ghost) return;
    ghost.remove();
    node.classList.remove("dragging");
    setTimeout(() => { delete node.dataset.dragged; }, 0);
    const target = columnAt(e.clientX, e.clientY);
    if (!target || target.dataset.column === c.column) return;
    change(c, "move", target.dataset.column);  // out of 已归档 too: the server restores, then moves
  };
  document.addEventListener("pointermove", move);
  document.addEventListener("pointerup", up);
}

function start() {
  if (!tg || !tg.initData) {
    $("outside").hidden = false;
    return;
  }
  tg.ready();
  if (tg.expand) tg.expand();
  $("scope").addEventListener("change", (e) => { state.scope = e.target.value; state.version = null; act(() => load(true)); });
  let typing = null;
  $("search").addEventListener("input", (e) => {
    clearTimeout(typing);
    typing = setTimeout(() => { state.query = e.target.value.trim(); act(() => load(true)); }, 300);
  });
  act(() => load(true));
  setInterval(() => { if (!state.busy && !state.dragging && !document.hidden) load(false).catch(() => {}); }, POLL_MS);
}

start();
