"""The request path settings: what each replica starts with."""

from app.config import AppConfig
from deployments.builder import with_env


def test_replicas_run_on_serves_event_loop_by_default():
    config = AppConfig()
    options = with_env(config.decode.to_serve_options(), config)
    assert options["ray_actor_options"]["runtime_env"] == {
        "env_vars": {
            "RAY_SERVE_RUN_USER_CODE_IN_SEPARATE_THREAD": "0",
            "RAY_SERVE_RUN_ROUTER_IN_SEPARATE_LOOP": "0",
        }
    }
    assert config.request_path.grpc


def test_serves_defaults_when_turned_off():
    config = AppConfig.model_validate({"request_path": {"replica_event_loop": False}})
    options = with_env(config.ingress.to_serve_options(), config)
    assert "runtime_env" not in options["ray_actor_options"]
