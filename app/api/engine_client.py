"""vLLM's engine-client interface over the pools: how vLLM's OpenAI layer drives splitserve.

vLLM's OpenAI serving classes (completions, chat, tokenization, models) call an
``EngineClient``. :class:`PoolEngineClient` is that client inside the ingress: its
``generate`` runs the request through the :class:`~app.flow.orchestrator.Orchestrator`
(remote prefill, KV transfer, decode; or the one pool in colocated mode) and turns the
token chunks a decode replica streams back into vLLM ``RequestOutput``s. Everything in
front of it (request validation, chat templates, tool and reasoning parsers, structured
output options, logprobs formatting, SSE framing, usage) is vLLM's own code, unchanged.

How the features that need more than one engine request are served:

- ``n > 1``: sample 0 is served like any request (its prompt's KV moves to decode);
  samples 1..n-1 start once sample 0 has streamed its first chunk from decode (not a first
  token sampled on prefill, which comes before the KV moves), prefilled on decode, where
  the prompt is then in the prefix cache (decision ``parallel_sample``). With a
  seed, sample ``k`` uses ``seed + k``, as vLLM does.
- prompt logprobs (``echo`` with ``logprobs``, ``prompt_logprobs``): only the engine that
  computes the prompt has its logits, so such requests are prefilled on decode
  (decision ``prompt_logprobs``).
- Batched prompts: vLLM's layer calls ``generate`` once per prompt; each is its own
  disaggregated request.

Admin hooks (LoRA, sleep, profiling, weight updates) are refused: they act on engines,
and this process has none.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import secrets
import time
from collections.abc import AsyncGenerator, Callable, Iterable
from http import HTTPStatus
from typing import Any

from app.api.answer_text import VllmAnswerText
from app.api.request_scope import REQUEST_SCOPE
from app.api.sample_output import SampleOutput, completion_output
from app.flow import request_trace
from app.flow.deadline import Deadline
from app.flow.migration import AnswerText
from app.flow.orchestrator import Orchestrator
from app.flow.request_timings import RequestTimings
from app.kv.failure import describe_failure
from app.pool.client import PoolBusy
from app.pool.records import GenerateRequest, TokenChunk

logger = logging.getLogger("splitserve.engine_client")


def prompt_token_ids(prompt: Any) -> list[int]:
    """The token ids of a prompt as vLLM's renderer hands it over (a token input)."""
    from vllm.exceptions import VLLMValidationError

    if isinstance(prompt, dict):
        if prompt.get("multi_modal_data") or prompt.get("type") not in (None, "token"):
            raise VLLMValidationError(
                f"{prompt.get('type', 'multimodal')} inputs are not served: "
                "the model takes text and token ids",
                parameter="messages",
            )
        ids = prompt.get("prompt_token_ids")
        if ids is not None:
            return list(ids)
    raise VLLMValidationError("prompt embeddings are not served", parameter="prompt")


class PoolEngineClient:
    """A vLLM ``EngineClient`` (``vllm.engine.protocol``) whose requests run on the pools.

    It implements the part of that interface vLLM's OpenAI serving classes use, by duck
    typing, so this module imports without vLLM; vLLM is imported when it is built.
    """

    def __init__(
        self,
        vllm_config: Any,
        orchestrator: Orchestrator,
        request_timeout_s: float,
        on_complete: Callable[[RequestTimings], None] | None = None,
        on_unfinished: Callable[[RequestTimings, str], None] | None = None,
    ) -> None:
        from vllm.renderers import renderer_from_config
        from vllm.v1.engine.input_processor import InputProcessor

        self.vllm_config = vllm_config
        self.model_config = vllm_config.model_config
        self.renderer = renderer_from_config(vllm_config)
        self.input_processor = InputProcessor(vllm_config, self.renderer)
        self.orchestrator = orchestrator
        self.request_timeout_s = request_timeout_s
        self.on_complete = on_complete
        # Each engine request that did not complete, and why ("failed" or "cancelled": the
        # client left or the deadline passed); the slow ones, which completed-only
        # histograms would leave out.
        self.on_unfinished = on_unfinished

    # --- what vLLM's serving classes call ---------------------------------------------

    async def generate(
        self,
        prompt: Any,
        sampling_params: Any,
        request_id: str,
        priority: int = 0,
        **_: Any,
    ) -> AsyncGenerator[Any, None]:
        """Serve one prompt (``sampling_params.n`` samples) as ``RequestOutput``s.

        Outputs follow ``sampling_params.output_kind``: deltas as each sample's chunks
        arrive, or one final output holding every sample.
        """
        from vllm.renderers.inputs.preprocess import extract_prompt_components
        from vllm.sampling_params import RequestOutputKind
        from vllm.utils.async_utils import merge_async_iterators

        ids = prompt_token_ids(prompt)
        # vLLM's own input checks (token ids in vocabulary, lengths, sampling and
        # structured-output parameters), here rather than on an engine: a bad request
        # is a 400 before any pool is called.
        engine_request = self.input_processor.process_inputs(
            request_id, prompt, sampling_params, supported_tasks=("generate",)
        )
        # The prompt's text, as vLLM's engine reports it (else the serving class works
        # it out again for every output).
        text = extract_prompt_components(self.model_config, prompt).text
        n = sampling_params.n or 1
        first_token = asyncio.Event()
        tokenizer = self.input_processor.tokenizer if sampling_params.detokenize else None

        def answer_text() -> AnswerText:  # after a migration (app.flow.migration)
            return VllmAnswerText(tokenizer, engine_request)

        # The engines' key for this request: made here, unique, never the client's own
        # ``X-Request-Id`` (which vLLM's layer puts in ``request_id``): engines abort by
        # it, so two clients sending the same id must not reach each other's request.
        engine_key = f"{request_id}-{secrets.token_hex(4)}"
        # vLLM's guard against guessing other users' prompts through the prefix cache,
        # carried to every engine and router that caches or hashes the prompt.
        salt = getattr(engine_request, "cache_salt", None) or None
        streams = [
            self._sample(
                ids, sampling_params, engine_key, k, n, first_token, answer_text, salt, priority
            )
            for k in range(n)
        ]
        samples = [SampleOutput(k) for k in range(n)]
        kind = sampling_params.output_kind
        merged = self._before(request_id, merge_async_iterators(*streams))
        try:
            async for index, chunk in merged:
                sample = samples[index]
                if kind is RequestOutputKind.DELTA:
                    sample.finish(chunk)
                    outputs = [completion_output(index, chunk)]
                    yield self._output(request_id, text, ids, outputs, samples, chunk)
                else:
                    sample.add(chunk)
                    if kind is RequestOutputKind.CUMULATIVE:
                        outputs = [completion_output(index, sample)]
                        yield self._output(request_id, text, ids, outputs, samples, sample)
        finally:
            await merged.aclose()
        if kind is not RequestOutputKind.DELTA:
            outputs = [completion_output(s.index, s) for s in samples]
            yield self._output(request_id, text, ids, outputs, samples, samples[0])

    def _output(
        self,
        request_id: str,
        text: str | None,
        ids: list[int],
        outputs: list[Any],
        samples: list[SampleOutput],
        source: SampleOutput | TokenChunk,
    ) -> Any:
        from vllm.outputs import RequestOutput

        return RequestOutput(
            request_id=request_id,
            prompt=text,
            prompt_token_ids=ids,
            prompt_logprobs=source.prompt_logprobs,
            outputs=outputs,
            finished=all(s.finish_reason is not None for s in samples),
            num_cached_tokens=samples[0].num_cached_tokens,
        )

    async def _sample(
        self,
        ids: list[int],
        sampling_params: Any,
        request_id: str,
        index: int,
        n: int,
        first_token: asyncio.Event,
        answer_text: Callable[[], AnswerText],
        salt: str | None = None,
        priority: int = 0,
    ) -> AsyncGenerator[TokenChunk, None]:
        """One sample's chunks; samples after the first wait for its first chunk from
        decode."""
        params = sampling_params.clone()
        params.n = 1
        local_reason = None
        if params.prompt_logprobs is not None:
            local_reason = "prompt_logprobs"
        if index:
            await first_token.wait()
            local_reason = local_reason or "parallel_sample"
            if params.seed is not None:
                params.seed += index
        timings = RequestTimings(prompt_tokens=len(ids))
        scope = REQUEST_SCOPE.get()
        if scope is not None and scope.arrived is not None:
            timings.ingress_s = time.perf_counter() - scope.arrived
        if scope is not None:
            scope.timings.append(timings)
        engine_id = request_id if n == 1 else f"{index}_{request_id}"
        session = scope.session_id if scope is not None else None
        if session is not None and salt:
            # A session lives within its salt: another tenant's client sending the same
            # x-session-id reaches none of this one's.
            session = f"{hashlib.sha256(salt.encode()).hexdigest()[:16]}:{session}"
        trace = scope.trace if scope is not None else None
        request = GenerateRequest(
            request_id=engine_id,
            prompt_token_ids=ids,
            sampling_params=params,
            local_prefill_reason=local_reason,
            session_id=session,
            origin_id=engine_id,
            cache_salt=salt,
            trace_headers=trace.headers() if trace is not None else None,
            # The request's priority class's, else vLLM's own (the body's `priority`).
            priority=(
                scope.priority if scope is not None and scope.priority is not None else priority
            ),
        )
        started = time.perf_counter()
        started_ns = time.time_ns()
        ended = "failed"
        answered = False
        try:
            async for chunk in self.orchestrator.run(request, timings, answer_text):
                timings.output_tokens += len(chunk.token_ids)
                if not answered:
                    answered = True
                    if scope is not None and scope.on_first_token is not None:
                        scope.on_first_token()
                # The samples after the first go once decode has the prompt: not at a
                # first token from prefill, which comes before the KV has moved.
                if not chunk.from_prefill:
                    first_token.set()
                yield chunk
            ended = ""
        except (GeneratorExit, asyncio.CancelledError):
            ended = "cancelled"
            raise
        finally:
            # The samples after the first wait for it: one that ended with no chunk (or
            # failed) must not keep them waiting until the deadline.
            if index == 0:
                first_token.set()
            if ended and self.on_unfinished is not None:
                timings.total_s = timings.total_s or time.perf_counter() - started
                try:
                    self.on_unfinished(timings, ended)
                except Exception:  # metrics must never fail a request
                    logger.exception("recording request metrics failed")
            if trace is not None:
                try:
                    request_trace.record(
                        trace, timings, started_ns, time.time_ns(), index, ended or None
                    )
                except Exception:  # tracing must never fail a request
                    logger.exception("recording the request's trace failed")
        if self.on_complete is not None:
            try:
                self.on_complete(timings)
            except Exception:  # metrics must never fail a request
                logger.exception("recording request metrics failed")

    async def _before(
        self, request_id: str, items: AsyncGenerator[Any, None]
    ) -> AsyncGenerator[Any, None]:
        """Re-yield ``items`` within the request's deadline; a pool failure becomes a 5xx."""
        from vllm.exceptions import GenerationError, GracefulHTTPError, VLLMError

        deadline = Deadline(self.request_timeout_s)
        try:
            while True:
                try:
                    item = await deadline.next(items)
                except StopAsyncIteration:
                    return
                yield item
        except TimeoutError as exc:
            raise GracefulHTTPError(
                f"request {request_id} missed its deadline of {self.request_timeout_s:g} s",
                HTTPStatus.GATEWAY_TIMEOUT,
            ) from exc
        except PoolBusy as exc:
            raise GracefulHTTPError(
                "server overloaded: the decode pool's queue is full; retry later",
                HTTPStatus.SERVICE_UNAVAILABLE,
            ) from exc
        except (VLLMError, asyncio.CancelledError, GeneratorExit):
            raise
        except Exception as exc:
            # The client learns that it failed, not the cluster's insides: why is logged.
            logger.exception("request %s failed: %s", request_id, describe_failure(exc))
            raise GenerationError(
                f"request {request_id} failed on the server; its log has why"
            ) from exc
        finally:
            deadline.cancel()
            await items.aclose()

    def check_admission(self, n: int = 1, request_id: str | None = None) -> None:
        """Admit every request here: the HTTP layer has already admitted it
        (:mod:`app.api.admission`), once per HTTP request, before vLLM's layer saw it."""

    async def abort(self, request_id: str | Iterable[str]) -> None:
        """Nothing to do: closing a request's stream aborts it on every pool."""

    # --- state and admin hooks ------------------------------------------------------------

    @property
    def is_running(self) -> bool:
        return True

    @property
    def is_stopped(self) -> bool:
        return False

    @property
    def errored(self) -> bool:
        return False

    @property
    def dead_error(self) -> BaseException:
        return RuntimeError("the ingress has no engine of its own")

    async def is_tracing_enabled(self) -> bool:
        return False

    async def do_log_stats(self) -> None:
        return None

    async def check_health(self) -> None:
        return None

    async def get_supported_tasks(self) -> tuple[str, ...]:
        return ("generate",)

    async def notify_kv_transfer_request_rejected(self, *args: Any, **kwargs: Any) -> None:
        # Clients may not send KV transfer params (the HTTP layer refuses them), so no
        # request of theirs ever pins remote blocks.
        return None

    def shutdown(self, timeout: float | None = None) -> None:
        renderer = getattr(self, "renderer", None)
        if renderer is not None:
            renderer.shutdown()

    async def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(
            "engine administration (LoRA, sleep, profiling, cache resets) is not served "
            "through the API front end of a disaggregated app"
        )

    encode = _refuse
    start_profile = stop_profile = _refuse
    reset_mm_cache = reset_encoder_cache = reset_prefix_cache = _refuse
    sleep = wake_up = is_sleeping = release_kv_cache_memory = _refuse
    add_lora = _refuse
    pause_generation = resume_generation = is_paused = _refuse
