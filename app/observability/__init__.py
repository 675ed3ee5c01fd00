"""What the app exports, below the packages whose figures it carries: the engines' metrics
into Ray's by pool (``engine_metrics``), series exported from 0 (``metric_zero``),
``GET /metrics`` in vLLM's names (``metrics_page``), and what a replica reads of its own
engine (``engine_tally``). The series of a request, a transfer, a link and a refusal live
with what they count: ``app.flow.request_metrics``, ``app.flow.transfer_metrics``,
``app.kv.link_meter``, ``app.api.admission_metrics``."""
