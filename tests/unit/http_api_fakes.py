"""Fake pools and the real OpenAI layer over them, for the HTTP API's unit tests."""

import asyncio

import pytest
from starlette.testclient import TestClient

from app.api.engine_client import PoolEngineClient
from app.api.http_api import OpenAIServer
from app.api.openai_serving import build_serving
from app.config import AppConfig, IngressConfig, Mode
from app.engine.setup import ingress_vllm_config
from app.flow.orchestrator import Orchestrator
from app.model.source import resolve_model
from app.pool.client import PoolClient
from app.pool.records import GenerateRequest, PrefillResult, Started, TokenChunk
from load_tests.client.sse import sse_data_sync


class FakePool(PoolClient):
    """Streams three one-token chunks (with logprobs when asked); remembers its requests."""

    def __init__(self, delay=0.0, fail=False, gate=None, gate_before=0):
        self.delay = delay
        self.fail = fail
        self.gate = gate  # a threading.Event that chunk ``gate_before`` waits for, when given
        self.gate_before = gate_before
        self.requests: list[GenerateRequest] = []
        self.prefills: list[GenerateRequest] = []

    async def prefill(self, request, transport=None):
        self.prefills.append(request)
        yield Started("p-1")
        yield PrefillResult({"remote_block_ids": [[1]]}, len(request.prompt_token_ids))

    async def generate(self, request):
        from vllm.logprobs import Logprob

        self.requests.append(request)
        if self.fail:
            raise RuntimeError("engine exploded")
        params = request.sampling_params
        seed = params.seed or 0
        for i in range(3):
            # The gate is a thread's event, set from the test's thread: polled.
            gated = i == self.gate_before and self.gate is not None
            while gated and not self.gate.is_set():  # noqa: ASYNC110
                await asyncio.sleep(0.01)
            await asyncio.sleep(self.delay)
            token = 10 + i + seed
            logprobs = None
            if params.logprobs is not None:
                logprobs = [{token: Logprob(-0.5 * (i + 1), 1, "x"), 99: Logprob(-3.0, 2, "y")}]
            prompt_logprobs = None
            if i == 0 and params.prompt_logprobs is not None:
                prompt_logprobs = [None] + [
                    {t: Logprob(-1.0, 1, "p")} for t in request.prompt_token_ids[1:]
                ]
            yield TokenChunk(
                f"t{token}",
                [token],
                finish_reason="length" if i == 2 else None,
                num_cached_tokens=2,
                logprobs=logprobs,
                cumulative_logprob=-0.5 * (i + 1) if logprobs else None,
                prompt_logprobs=prompt_logprobs,
            )


@pytest.fixture(scope="module")
def engine_client():
    config = AppConfig(openai={"enable_prompt_tokens_details": True})
    path = resolve_model(config.model.source)
    client = PoolEngineClient(
        ingress_vllm_config(config, path), Orchestrator(Mode.COLOCATED, FakePool()), 10
    )
    client.serving = build_serving(client, config, path)  # type: ignore[attr-defined]
    return client


def make_client(
    engine_client,
    pool=None,
    prefill=None,
    api_key=None,
    timeout_s=10.0,
    metrics_page=None,
    tracing=None,
    priority=None,
    **ingress,
):
    pool = pool or FakePool()
    engine_client.orchestrator = Orchestrator(
        Mode.DISAGGREGATED, pool, prefill or FakePool(), local_prefill_below_tokens=0
    )
    engine_client.request_timeout_s = timeout_s
    engine_client.on_complete = None
    ingress.setdefault("report_internals", True)
    server = OpenAIServer(
        engine_client.serving,
        IngressConfig(**ingress),
        api_key,
        metrics_page,
        tracing=tracing,
        priority=priority,
    )
    client = TestClient(server.asgi_app())
    client.server = server  # type: ignore[attr-defined]
    return client


@pytest.fixture
def client(engine_client):
    return make_client(engine_client)


def sse_events(response):
    """The data of each event of a streamed answer (``[DONE]`` included)."""
    return list(sse_data_sync(response))
