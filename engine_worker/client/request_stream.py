"""A request into vLLM and its outputs back: ``SamplingParams`` from the gateway's
options, and each ``RequestOutput`` delta as a plain ``GenerationChunk``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from engine_worker.contract.api import (
    ITL_SLO_ARG,
    TTFT_SLO_ARG,
    ChoiceDelta,
    EngineDeadError,
    GenerationChunk,
    RequestStream,
    SamplingOptions,
    TokenLogprob,
)


def _sampling_params(options: SamplingOptions) -> Any:
    from vllm.sampling_params import RequestOutputKind, SamplingParams, StructuredOutputsParams

    structured = None
    if options.json_schema is not None:
        structured = StructuredOutputsParams(json=options.json_schema)
    elif options.json_object:
        structured = StructuredOutputsParams(json_object=True)
    if options.structural_tag is not None:
        structured = StructuredOutputsParams(structural_tag=options.structural_tag)
    optional = {
        name: value
        for name in ("top_k", "min_p", "repetition_penalty", "logit_bias", "watermarking")
        if (value := getattr(options, name)) is not None
    }
    if options.allowed_token_ids is not None:
        optional["allowed_token_ids"] = list(options.allowed_token_ids)
    return SamplingParams(
        n=options.n,
        max_tokens=options.max_tokens,
        min_tokens=options.min_tokens,
        temperature=options.temperature,
        top_p=options.top_p,
        skip_special_tokens=options.skip_special_tokens,
        spaces_between_special_tokens=options.spaces_between_special_tokens,
        **optional,
        seed=options.seed,
        stop=list(options.stop) or None,
        stop_token_ids=list(options.stop_token_ids) or None,
        include_stop_str_in_output=options.include_stop_str_in_output,
        bad_words=list(options.bad_words) or None,
        presence_penalty=options.presence_penalty,
        frequency_penalty=options.frequency_penalty,
        logprobs=options.logprobs,
        ignore_eos=options.ignore_eos,
        structured_outputs=structured,
        output_kind=RequestOutputKind.DELTA,
        extra_args=_objective_args(options),
    )


def _objective_args(options: SamplingOptions) -> dict[str, float] | None:
    """The request's own objectives for the scheduler (``contract.api.TTFT_SLO_ARG``)."""
    args = {
        key: value
        for key, value in ((TTFT_SLO_ARG, options.ttft_slo_ms), (ITL_SLO_ARG, options.itl_slo_ms))
        if value is not None
    }
    return args or None


def _logprobs(token_ids: list[int], entries: Any) -> list[TokenLogprob] | None:
    if entries is None:
        return None
    out = []
    for token_id, by_id in zip(token_ids, entries, strict=False):
        chosen = by_id[token_id]
        top = sorted(by_id.values(), key=lambda lp: lp.rank or 0)
        out.append(
            TokenLogprob(
                token=chosen.decoded_token or "",
                logprob=float(chosen.logprob),
                top=tuple((lp.decoded_token or "", float(lp.logprob)) for lp in top),
            )
        )
    return out


def _chunk(output: Any) -> GenerationChunk:
    choices = [
        ChoiceDelta(
            index=c.index,
            text=c.text,
            token_ids=list(c.token_ids),
            logprobs=_logprobs(list(c.token_ids), c.logprobs),
            finish_reason=c.finish_reason if c.finished() else None,
        )
        for c in output.outputs
    ]
    return GenerationChunk(
        choices=choices,
        num_prompt_tokens=len(output.prompt_token_ids or ()),
        finished=bool(output.finished),
        num_cached_tokens=int(output.num_cached_tokens or 0),
    )


class _VLLMRequestStream(RequestStream):
    """A request's outputs from vLLM's per-request collector."""

    def __init__(self, collector: Any, abort: Callable[..., Awaitable[None]]) -> None:
        super().__init__()
        self._collector = collector
        self._abort_in_engine = abort
        self._has_output = False

    async def first_output(self) -> bool:
        # vLLM's output handler puts each output in the collector and sets ``ready``,
        # whoever reads it and whenever.
        if not self._has_output:
            await self._collector.ready.wait()
        output = self._collector.output  # None once read: then ``_next`` says how it went
        return self._has_output or (output is not None and not isinstance(output, Exception))

    async def _next(self) -> GenerationChunk:
        from vllm.v1.engine.exceptions import EngineDeadError as VLLMEngineDead

        collector = self._collector
        try:
            output = collector.get_nowait() or await collector.get()
        except VLLMEngineDead as exc:
            raise EngineDeadError(str(exc)) from exc
        self._has_output = True
        return _chunk(output)

    def _release(self) -> None:
        self._collector.close()

    async def _abort(self) -> None:
        await self._abort_in_engine(self._collector.request_id, internal=True)
