// Chinese or English, from the browser's language, switched by the [data-role=lang] button.
// Static text carries data-i18n / data-i18n-placeholder keys; code calls t(key, ...args).

const TEXT = {
  en: {
    "lang.other": "中文",
    "nav.live": "Live",
    "nav.playground": "Playground",
    "conn.idle": "",
    "conn.connecting": "connecting…",
    "conn.live": "live",
    "conn.retry": "reconnecting…",
    "conn.auth": "admin key needed",
    "auth.prompt": "This proxy is a gateway: the live view needs one of its admin keys (THINKPROXY_ADMIN_KEYS).",
    "auth.placeholder": "admin key",
    "auth.submit": "Connect",
    "auth.refused": "That key was refused.",
    "col.time": "Time",
    "col.provider": "Provider",
    "col.model": "Model",
    "col.level": "Level",
    "col.method": "Method",
    "col.status": "Status",
    "col.ttft": "TTFT",
    "col.thinking": "Thinking",
    "col.total": "Total",
    "col.tools": "Tools",
    "live.empty": "No requests yet. Send one through this proxy (or use the playground) and it appears here.",
    "live.count": (n, shared) => `${n} recent request${n === 1 ? "" : "s"}` + (shared ? " · all replicas" : ""),
    "live.inflight": "in flight",
    "live.passthrough": "passthrough",
    "mode.auto": "Auto",
    "mode.pro": "Pro",
    "detail.timeline": "Timeline",
    "detail.none": "No trace for this request (not a chat completion, or it failed before the upstream answered).",
    "detail.dropped": (n) => `… ${n} more events not kept`,
    "fact.provider": "Provider",
    "fact.model": "Model",
    "fact.level": "Level requested → applied",
    "fact.method": "Thinking method",
    "fact.status": "Status",
    "fact.error": "Error",
    "fact.ttft": "Time to first token",
    "fact.thinking": "Thinking time",
    "fact.total": "Total time",
    "fact.finish": "Finish reason",
    "fact.tokens": "Tokens (prompt / completion)",
    "fact.tools": "Tool calls",
    "fact.replica": "Replica",
    "fact.stream": "Stream",
    "stage.analyzing": "Analyzing the request",
    "stage.thinking": "Thinking",
    "stage.tool_calling": "Calling tools",
    "stage.answering": "Writing the answer",
    "ev.reasoning.start": "Started thinking",
    "ev.reasoning.end": (d) => `Thought for ${d}`,
    "ev.tool.calling": "calling…",
    "ev.tool.end": "Arguments ready",
    "ev.tool.result": "Tool result",
    "ev.done": (d) => `Done in ${d}`,
    "ev.error": "Error",
    "tool.input": "input",
    "tool.output": "output",
    "tool.success": "success",
    "tool.error": "error",
    "tool.running": "running",
    "done.finish": "finish",
    "done.ttft": "first token",
    "pg.key": "API key",
    "pg.key.placeholder": "kept in this page only",
    "pg.model": "Model",
    "pg.level": "Thinking level",
    "pg.level.default": "proxy default",
    "pg.level.off": "off",
    "pg.level.standard": "standard",
    "pg.level.deep": "deep",
    "pg.trace": "Trace",
    "pg.reasoning": "Reasoning",
    "pg.reasoning.show": "show",
    "pg.reasoning.hide": "hide",
    "pg.tools": "Offer a sample tool (get_weather)",
    "pg.upstream": "Upstream (optional, X-Upstream-Base-URL)",
    "pg.prompt": "Prompt",
    "pg.prompt.placeholder": "Ask something…",
    "pg.send": "Send",
    "pg.stop": "Stop",
    "pg.thinking": (d) => `Thinking… ${d}`,
    "pg.thought": (d) => `Thought for ${d}`,
    "pg.hidden": "(reasoning hidden: X-Reasoning: hide)",
    "pg.streaming": "streaming…",
    "pg.done": (d) => `done in ${d}`,
    "pg.stopped": "stopped",
    "pg.applied": (level, provider, method) => `level ${level} · ${provider}` + (method ? ` · ${method}` : ""),
    "pg.needprompt": "Write a prompt first.",
    "ms": (v) => (v < 1000 ? `${Math.round(v)} ms` : `${(v / 1000).toFixed(1)} s`),
  },
  zh: {
    "lang.other": "English",
    "nav.live": "实时",
    "nav.playground": "试验场",
    "conn.idle": "",
    "conn.connecting": "连接中…",
    "conn.live": "已连接",
    "conn.retry": "重新连接中…",
    "conn.auth": "需要管理员密钥",
    "auth.prompt": "此代理为网关模式：实时视图需要管理员密钥（THINKPROXY_ADMIN_KEYS）。",
    "auth.placeholder": "管理员密钥",
    "auth.submit": "连接",
    "auth.refused": "密钥被拒绝。",
    "col.time": "时间",
    "col.provider": "服务商",
    "col.model": "模型",
    "col.level": "级别",
    "col.method": "方式",
    "col.status": "状态",
    "col.ttft": "首字",
    "col.thinking": "思考",
    "col.total": "总计",
    "col.tools": "工具",
    "live.empty": "还没有请求。通过此代理发送一个请求（或使用试验场），它会出现在这里。",
    "live.count": (n, shared) => `最近 ${n} 个请求` + (shared ? " · 全部副本" : ""),
    "live.inflight": "进行中",
    "live.passthrough": "透传",
    "mode.auto": "简要",
    "mode.pro": "详细",
    "detail.timeline": "时间线",
    "detail.none": "此请求没有追踪（不是对话补全，或在上游回答前就失败了）。",
    "detail.dropped": (n) => `… 另有 ${n} 个事件未保留`,
    "fact.provider": "服务商",
    "fact.model": "模型",
    "fact.level": "请求级别 → 实际级别",
    "fact.method": "思考方式",
    "fact.status": "状态",
    "fact.error": "错误",
    "fact.ttft": "首字时间",
    "fact.thinking": "思考时间",
    "fact.total": "总时间",
    "fact.finish": "结束原因",
    "fact.tokens": "Token（输入 / 输出）",
    "fact.tools": "工具调用",
    "fact.replica": "副本",
    "fact.stream": "流式",
    "stage.analyzing": "正在分析请求",
    "stage.thinking": "正在思考",
    "stage.tool_calling": "正在调用工具",
    "stage.answering": "正在整理答案",
    "ev.reasoning.start": "开始思考",
    "ev.reasoning.end": (d) => `思考了 ${d}`,
    "ev.tool.calling": "调用中…",
    "ev.tool.end": "参数已生成",
    "ev.tool.result": "工具结果",
    "ev.done": (d) => `完成，用时 ${d}`,
    "ev.error": "出错",
    "tool.input": "输入",
    "tool.output": "输出",
    "tool.success": "成功",
    "tool.error": "失败",
    "tool.running": "进行中",
    "done.finish": "结束",
    "done.ttft": "首字",
    "pg.key": "API 密钥",
    "pg.key.placeholder": "只保存在本页面内存中",
    "pg.model": "模型",
    "pg.level": "思考级别",
    "pg.level.default": "代理默认",
    "pg.level.off": "关闭",
    "pg.level.standard": "标准",
    "pg.level.deep": "深度",
    "pg.trace": "追踪",
    "pg.reasoning": "推理内容",
    "pg.reasoning.show": "显示",
    "pg.reasoning.hide": "隐藏",
    "pg.tools": "提供示例工具（get_weather）",
    "pg.upstream": "上游（可选，X-Upstream-Base-URL）",
    "pg.prompt": "提示词",
    "pg.prompt.placeholder": "问点什么…",
    "pg.send": "发送",
    "pg.stop": "停止",
    "pg.thinking": (d) => `思考中… ${d}`,
    "pg.thought": (d) => `思考了 ${d}`,
    "pg.hidden": "（推理内容已隐藏：X-Reasoning: hide）",
    "pg.streaming": "生成中…",
    "pg.done": (d) => `完成，用时 ${d}`,
    "pg.stopped": "已停止",
    "pg.applied": (level, provider, method) => `级别 ${level} · ${provider}` + (method ? ` · ${method}` : ""),
    "pg.needprompt": "请先输入提示词。",
    "ms": (v) => (v < 1000 ? `${Math.round(v)} 毫秒` : `${(v / 1000).toFixed(1)} 秒`),
  },
};

let current = (navigator.languages && navigator.languages[0]) || navigator.language || "en";
current = current.toLowerCase().startsWith("zh") ? "zh" : "en";
const listeners = [];

export function lang() {
  return current;
}

export function t(key, ...args) {
  const value = TEXT[current][key] ?? TEXT.en[key] ?? key;
  return typeof value === "function" ? value(...args) : value;
}

export function ms(value) {
  return value === null || value === undefined ? "—" : t("ms", value);
}

export function applyStatic(root = document) {
  document.documentElement.lang = current === "zh" ? "zh-CN" : "en";
  for (const el of root.querySelectorAll("[data-i18n]")) el.textContent = t(el.dataset.i18n);
  for (const el of root.querySelectorAll("[data-i18n-placeholder]")) {
    el.setAttribute("placeholder", t(el.dataset.i18nPlaceholder));
  }
  const button = document.querySelector('[data-role="lang"]');
  if (button) {
    button.textContent = t("lang.other");
    button.dataset.lang = current;
  }
}

export function setLang(value) {
  current = value === "zh" ? "zh" : "en";
  applyStatic();
  for (const fn of listeners) fn(current);
}

export function onLangChange(fn) {
  listeners.push(fn);
}
