"""Documentation generated from the code and from result files, so the docs cannot drift from either.

- `config_table`: the connector's option table in docs/connector.md, from `toolkit/vllm/config.py`;
- `results_page`: a dated results page in docs/results/ from run folders (summary.json, params.json).

Both read files only: nothing here imports vLLM or torch (`kvtk docs` runs in seconds on a bare install).
"""
