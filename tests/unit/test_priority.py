"""Priority classes: a class's share of admission's limits sheds the lower classes first;
the class comes from a header (an unknown one is a 400 naming the known, under any
load); its priority reaches the engines of both pools, which then schedule by priority."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from app.api.admission import Admission, Reason
from app.config import AppConfig, PriorityConfig
from app.engine.setup import engine_arguments
from app.model.source import resolve_model
from app.pool.records import Role
from tests.unit.http_api_fakes import FakePool, make_client

CLASSES = {
    "classes": {
        "interactive": {"priority": 0},
        "batch": {"priority": 10, "admission_share": 0.5},
    },
    "default_class": "interactive",
}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _waiting(admission: Admission, count: int) -> None:
    for _ in range(count):
        admission.admit().parsed()


def test_a_lower_share_is_refused_at_its_share_of_the_queue():
    admission = Admission(ttft_budget_s=4.0, max_waiting=10, clock=Clock())
    _waiting(admission, 4)
    assert admission.refusal(0.5) is None
    _waiting(admission, 1)
    refused = admission.refusal(0.5)
    assert refused is not None and refused.reason is Reason.MAX_WAITING
    assert "fewer than 5 wait" in str(refused)
    assert admission.refusal(1.0) is None  # the higher class keeps the rest
    _waiting(admission, 5)
    refused = admission.refusal(1.0)
    assert refused is not None and refused.reason is Reason.MAX_WAITING


def test_a_lower_share_is_refused_at_its_share_of_the_oldest_wait():
    clock = Clock()
    admission = Admission(ttft_budget_s=4.0, max_waiting=100, headroom=0.5, clock=clock)
    _waiting(admission, 1)
    clock.now += 1.5  # the limit is 2 s; half of it 1 s
    assert admission.refusal(1.0) is None
    refused = admission.refusal(0.5)
    assert refused is not None and refused.reason is Reason.OLDEST_WAIT


def test_a_lower_share_is_refused_at_its_share_of_the_predicted_wait():
    clock = Clock()
    admission = Admission(
        ttft_budget_s=10.0, max_waiting=100, predicted_share=0.5, clock=clock, min_samples=4
    )
    # A drain rate of 2 first tokens a second, each served at once from a queue of one.
    for _ in range(8):
        ticket = admission.admit()
        ticket.parsed()
        clock.now += 0.5
        ticket.first_token()
    _waiting(admission, 6)  # predicted wait: 6 / 2 = 3 s, the limit 5 s, half of it 2.5 s
    assert admission.refusal(1.0) is None
    refused = admission.refusal(0.5)
    assert refused is not None and refused.reason is Reason.PREDICTED_WAIT


def test_the_config_names_its_default_among_its_classes():
    config = PriorityConfig.model_validate(CLASSES)
    default, batch = config.of(None), config.of("batch")
    assert default is not None and default[0] == "interactive"
    assert batch is not None and batch[1].admission_share == 0.5
    assert config.of("nope") is None
    with pytest.raises(ValidationError, match="default_class must name one of"):
        PriorityConfig.model_validate({**CLASSES, "default_class": "bulk"})
    with pytest.raises(ValidationError, match="default_class"):
        PriorityConfig.model_validate({"classes": CLASSES["classes"]})
    with pytest.raises(ValidationError, match="admission_share"):
        PriorityConfig.model_validate(
            {"classes": {"x": {"admission_share": 0}}, "default_class": "x"}
        )
    assert not PriorityConfig().enabled and PriorityConfig().of("batch") is None


def test_the_engines_schedule_by_priority_only_with_classes():
    path = resolve_model("builtin:tiny-llama")
    plain = AppConfig()
    classed = AppConfig.model_validate({"priority": CLASSES})
    for role in (Role.PREFILL, Role.DECODE):
        assert engine_arguments(role, plain, path, "e").scheduling_policy == "fcfs"
        assert engine_arguments(role, classed, path, "e").scheduling_policy == "priority"


BODY = {"model": "tiny-llama", "prompt": [5, 6, 7, 8], "max_tokens": 3}


def test_the_class_header_sets_the_engines_priority_and_unknown_is_a_400(engine_client):
    decode, prefill = FakePool(), FakePool()
    priority = PriorityConfig.model_validate(CLASSES)
    client = make_client(engine_client, pool=decode, prefill=prefill, priority=priority)
    response = client.post("/v1/completions", json=BODY, headers={"x-priority-class": "batch"})
    assert response.status_code == 200, response.text
    assert decode.requests[-1].priority == 10 and prefill.prefills[-1].priority == 10
    response = client.post("/v1/completions", json=BODY)  # the default class
    assert response.status_code == 200
    assert decode.requests[-1].priority == 0
    response = client.post("/v1/completions", json=BODY, headers={"x-priority-class": "bulk"})
    assert response.status_code == 400
    error = response.json()["error"]
    assert "unknown priority class 'bulk'" in error["message"]
    assert "batch, interactive" in error["message"]
    assert error["param"] == "x-priority-class"


def test_without_classes_the_header_is_ignored_and_vllms_priority_passes(engine_client):
    decode = FakePool()
    client = make_client(engine_client, pool=decode)
    headers = {"x-priority-class": "whatever"}
    response = client.post("/v1/completions", json={**BODY, "priority": 3}, headers=headers)
    assert response.status_code == 200, response.text
    assert decode.requests[-1].priority == 3


def test_an_unknown_class_is_a_400_even_when_the_app_refuses_load(engine_client):
    priority = PriorityConfig.model_validate(CLASSES)
    client = make_client(engine_client, priority=priority, admission={"max_waiting": 2})
    client.server.admission.enter().parsed()  # one waits: batch's share (1 of 2) is full
    response = client.post("/v1/completions", json=BODY, headers={"x-priority-class": "??"})
    assert response.status_code == 400
    response = client.post("/v1/completions", json=BODY, headers={"x-priority-class": "batch"})
    assert response.status_code == 503 and "retry-after" in response.headers
    response = client.post("/v1/completions", json=BODY)  # interactive keeps the rest
    assert response.status_code == 200
