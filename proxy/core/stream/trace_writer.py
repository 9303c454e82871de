"""How the trace writes its events: numbered in order, in the trace's language, tool events with
their display titles. Pure; the trace (proxy.core.stream.trace) decides *when* an event happens,
this module *what it says*.

The words of each event live here, English and Chinese side by side, so the state machine reads as
stages and calls, not as messages.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from proxy.core.stream.summaries import output_is_error, summarize_output
from proxy.core.stream.tool_args import ToolCall
from proxy.core.stream.trace_format import duration_text, ms, replay_text


class EventWriter:
    """Makes one response's trace events: `seq` 0, 1, 2… across the response, messages in English
    or Chinese (`zh`), and a tool's display title ({"en": …, "zh": …} by tool name,
    proxy.core.config.tool_titles) on the events of a named tool."""

    __slots__ = ("_seq", "_titles", "_zh")

    def __init__(self, zh: bool, titles: Mapping[str, Mapping[str, str]] | None) -> None:
        self._zh = zh
        self._titles = titles or {}
        self._seq = 0

    def event(self, type_: str, t: float, message: str, **fields: Any) -> dict[str, Any]:
        event = {"type": type_, "seq": self._seq, "t_ms": ms(t), "message": message, **fields}
        self._seq += 1
        return event

    def text(self, en: str, zh: str) -> str:
        return zh if self._zh else en

    def title_of(self, name: str) -> dict[str, str]:
        """`{"title": …}` for a tool with a display title, else nothing."""
        title = self._titles.get(name) if self._titles else None
        if not title:
            return {}
        return {"title": title["zh" if self._zh else "en"]}

    def replaying(self, t: float, replay: dict[str, int]) -> dict[str, Any]:
        """What the replay store did for the request's history (restored, placeholder, missing)."""
        return self.event("status", t, self.text(*replay_text(replay)), stage="replaying", **replay)

    def error(self, t: float, text: str, code: str | None) -> dict[str, Any]:
        fields: dict[str, Any] = {"code": code} if code is not None else {}
        return self.event("error", t, f"出错：{text}" if self._zh else text, **fields)

    def reasoning_start(self, t: float) -> dict[str, Any]:
        return self.event("reasoning.start", t, self.text("Started thinking", "开始思考"))

    def tool_result(
        self, t: float, call_id: str, name: str, content: Any, duration: float | None
    ) -> dict[str, Any]:
        """A tool call the request answered: its outcome and a summary of its output."""
        failed = output_is_error(content)
        timing = {"duration_ms": ms(duration)} if duration is not None else {}
        return self.event(
            "tool_result",
            t,
            self.text(
                f"Tool result: {name} ({'error' if failed else 'success'})",
                f"工具结果：{name}（{'失败' if failed else '成功'}）",
            ),
            id=call_id,
            name=name,
            output_summary=summarize_output(content),
            status="error" if failed else "success",
            **self.title_of(name),
            **timing,
        )

    def tool_call_start(self, t: float, call: ToolCall) -> dict[str, Any]:
        name = call.shown_name
        title = self.title_of(name)
        message = title["title"] if title else self.text(f"Calling tool: {name}", f"调用工具：{name}")
        return self.event("tool_call.start", t, message, id=call.id, name=name, index=call.index, **title)

    def tool_call_end(self, t: float, call: ToolCall) -> dict[str, Any]:
        name = call.shown_name
        return self.event(
            "tool_call.end",
            t,
            self.text(f"Arguments ready for {name}", f"已生成 {name} 的参数"),
            id=call.id,
            name=name,
            index=call.index,
            input_summary=call.summary(),
            **self.title_of(name),
        )

    def reasoning_end(self, t: float, duration: float) -> dict[str, Any]:
        en, zh = duration_text(duration)
        return self.event(
            "reasoning.end", t, self.text(f"Thought for {en}", f"思考了 {zh}"), duration_ms=ms(duration)
        )

    def done(self, t: float, total: float, fields: dict[str, Any]) -> dict[str, Any]:
        """The answer is over, `total` ms after the request came (`fields`: usage, times, level…)."""
        en, zh = duration_text(total)
        return self.event("done", t, self.text(f"Done in {en}", f"完成，用时 {zh}"), **fields)
