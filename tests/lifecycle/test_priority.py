"""Priority classes on real engines: the default app with two classes, so every engine of
both pools runs vLLM's priority scheduling. Each class is served on both paths (a remote
prefill whose KV moves over NIXL, and a prefill on decode), with the same greedy answer
in either class; an unknown class is a 400 naming the known ones.

Runs in the lifecycle session: it starts and stops a Ray cluster of its own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from load_tests.systems.local_app import LocalApp
from tests.integration.helpers import GREEDY, random_prompt

CONFIG = Path(__file__).parents[2] / "serve_configs" / "default.yaml"
CLASSES = {
    "classes": {
        "interactive": {"priority": 0},
        "batch": {"priority": 10, "admission_share": 0.5},
    },
    "default_class": "interactive",
}
REMOTE_TOKENS = 600  # above the default config's local_prefill_below_tokens (512)
# float32: the same prompt's later requests find its KV cached on decode and compute only
# the tail, and in bfloat16 that rounds differently from the first request's one-pass
# prefill, so a near-tie of the random tiny model can flip (seen on an AMD EPYC without
# AVX-512), where the classes' answers are the same.
FLOAT32 = {"dtype": "float32"}


def test_each_class_is_served_on_both_paths_with_the_same_answer():
    with (
        LocalApp(CONFIG, overrides={"priority": CLASSES, "model": FLOAT32}) as app,
        httpx.Client(timeout=120) as http,
    ):

        def complete(prompt: list[int], name: str | None) -> dict[str, Any]:
            headers = {"x-priority-class": name} if name else {}
            body = {**GREEDY, "model": "tiny-llama", "prompt": prompt}
            response = http.post(app.url + "/v1/completions", json=body, headers=headers)
            assert response.status_code == 200, response.text
            answer: dict[str, Any] = response.json()
            assert answer["usage"]["completion_tokens"] == GREEDY["max_tokens"]
            return answer

        seed = 700
        for length, remote in ((REMOTE_TOKENS, True), (16, False)):
            for name in ("batch", "interactive", None):
                seed += 1
                prompt = random_prompt(seed, length)
                first = complete(prompt, name)  # a fresh prompt: no engine holds it
                report = first["splitserve"]
                assert report["disaggregated"] is remote, (name, report)
                if remote:
                    assert report["kv_transport"] == "nixl", (name, report)
                # The same prompt in the other classes: the same greedy answer.
                texts = {name: first["choices"][0]["text"]}
                for other in {"batch", "interactive", None} - {name}:
                    texts[other] = complete(prompt, other)["choices"][0]["text"]
                assert len(set(texts.values())) == 1, texts
        response = http.post(
            app.url + "/v1/completions",
            json={**GREEDY, "model": "tiny-llama", "prompt": [5, 6, 7]},
            headers={"x-priority-class": "bulk"},
        )
        assert response.status_code == 400
        assert "batch, interactive" in response.json()["error"]["message"]
