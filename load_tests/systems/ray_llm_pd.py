"""The peer: Ray Serve LLM's ``build_pd_openai_app`` (NIXL) on the builtin model, on CPU.

Used by ``load_tests.serving.compare`` as a system to measure side by side. Prefill engine on
core 0, decode engine on core 1 (the same cores as splitserve's default config), 1 GiB
KV cache each, eager mode, prefix caching on, NixlConnector with ``kv_buffer_device:
cpu``. Needs pyarrow and pandas (the ``peer`` extra), not the ``ray[llm]`` extra, which
pins a CUDA vLLM. Run inside scripts/loopback-netns like every benchmark.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from app.model.source import resolve_model
from app.net import free_port


def _engine_config(core: str, max_model_len: int) -> Any:
    from ray.serve.llm import LLMConfig

    return LLMConfig(
        model_loading_config={
            "model_id": "tiny-llama",
            "model_source": resolve_model("builtin:tiny-llama"),
        },
        engine_kwargs={
            "max_model_len": max_model_len,
            "enforce_eager": True,
            "enable_prefix_caching": True,
            "kv_transfer_config": {
                "kv_connector": "NixlConnector",
                "kv_role": "kv_both",
                "kv_buffer_device": "cpu",
            },
        },
        placement_group_config={"bundles": [{"CPU": 1}]},
        runtime_env={
            "env_vars": {
                "VLLM_CPU_OMP_THREADS_BIND": core,
                "VLLM_CPU_KVCACHE_SPACE": "1",
                "VLLM_NO_USAGE_STATS": "1",
            }
        },
        deployment_config={"num_replicas": 1},
    )


@contextmanager
def ray_serve_llm_pd(max_model_len: int = 2048, num_cpus: int = 8) -> Iterator[str]:
    """Start the PD app in this process's own Ray cluster; yield its base URL.

    ``num_cpus`` is logical: each engine deployment asks for a 2-CPU bundle and the
    ingress for one more; the engines are pinned to real cores by their env vars.
    """
    import ray
    from ray import serve
    from ray.serve.llm import build_pd_openai_app

    ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
    try:
        port = free_port("127.0.0.1")
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        app = build_pd_openai_app(
            {
                "prefill_config": _engine_config("0", max_model_len),
                "decode_config": _engine_config("1", max_model_len),
            }
        )
        serve.run(app, name="ray-llm-pd", route_prefix="/")  # returns once the app runs
        yield f"http://127.0.0.1:{port}"
    finally:
        serve.shutdown()  # type: ignore[no-untyped-call]
        ray.shutdown()
