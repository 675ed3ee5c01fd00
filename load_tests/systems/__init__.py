"""The systems under test and how each is started: a splitserve app in its own Ray cluster
on loopback (``local_app``), vLLM's own server bound to its core (``vllm_server``), Ray
Serve LLM's PD app (``ray_llm_pd``), a Ray cluster over the project's test hosts
(``testnet_cluster``); what a running system's processes and pools use (``process_usage``,
``pool_usage``) and the conditions every result records (``run_conditions``). Tests import
it too."""
