"""A ``tool_choice`` that names a function: the output is that function's arguments.

The function is known, so the model writes only its arguments object, constrained to
the function's ``parameters`` schema, and the call is built around it. A parser's
structural tag (``required``, where the model picks the function) would make the model
write the whole ``<tool_call>`` envelope, name included, out of the same token budget.
"""

from __future__ import annotations

import uuid
from typing import Any

from engine_worker.contract.api import ChatOutput, OutputParser, ParsedOutput, ToolCallDelta

ANY_OBJECT: dict[str, Any] = {"type": "object"}
"""The constraint for a function declared without ``parameters``."""


def new_call_id() -> str:
    """An id in the form vLLM's server and OpenAI's give (``call_`` and 24 characters)."""
    return f"call_{uuid.uuid4().hex[:24]}"


class NamedCallParser:
    """One choice's output read as the named function's arguments, whole or streamed."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._id = new_call_id()
        self._is_open = False

    def parse(self, text: str, token_ids: list[int]) -> ParsedOutput:
        call = ToolCallDelta(index=0, id=self._id, name=self._name, arguments=text)
        return ParsedOutput(content=None, tool_calls=[call])

    def parse_delta(self, text: str, token_ids: list[int], finished: bool) -> ParsedOutput | None:
        if self._is_open:
            return (
                ParsedOutput(tool_calls=[ToolCallDelta(index=0, arguments=text)]) if text else None
            )
        if not text and not finished:
            return None
        # The first piece opens the call, as OpenAI's stream does: id and name, then
        # arguments in the pieces that follow.
        self._is_open = True
        call = ToolCallDelta(index=0, id=self._id, name=self._name, arguments=text)
        return ParsedOutput(tool_calls=[call])


def named_call_output(name: str, parameters: dict[str, Any] | None) -> ChatOutput:
    """The constraint and parsers for a call of ``name`` forced by ``tool_choice``."""

    def new_parser() -> OutputParser:
        return NamedCallParser(name)

    schema = parameters if parameters else ANY_OBJECT
    return ChatOutput(constraints={"json_schema": schema}, new_parser=new_parser)
