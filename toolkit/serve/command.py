"""The `vllm serve` command line `kvtk serve` runs: vLLM's server with the toolkit's connector configured.

Pure (no vllm import): `build_serve_command` returns the argv and the environment variables it adds, which is also
what `kvtk serve --print-command` prints. Every option the caller passes through reaches `vllm serve` unchanged;
a default below is added only where the caller did not give that option.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import shlex
import sys
from dataclasses import dataclass, field

from toolkit.errors import BadInput
from toolkit.vllm.config import CONNECTORS
from toolkit.vllm.transfer_config import kv_transfer_config as build_transfer_config

DEFAULT_CPU_BYTES = 256 << 20  # the tiny models' tier size in the live tests; real models pass --cpu-bytes
DEFAULT_SHUTDOWN_TIMEOUT_S = (
    15  # vLLM's default 0 force-kills the engine core on SIGTERM: the connector never shuts down
)
DEFAULT_TINY_MAX_MODEL_LEN = 4096
DEFAULT_TINY_PREFIX_MATCH_UNIT = 128  # fine-grained hits inside the tiny models' hybrid blocks
LAUNCHER_MODULE = "toolkit.serve.vllm_cli"
# The connectors `kvtk serve` configures ("none" is no --kv-transfer-config at all).
SERVE_CONNECTORS = {name: entry for name, entry in CONNECTORS.items() if entry is not None}


@dataclass(frozen=True)
class ServeCommand:
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)  # added to the caller's environment (never overriding it)

    def shell(self) -> str:
        """The command as one shell line, environment assignments first."""
        assignments = [f"{key}={shlex.quote(value)}" for key, value in sorted(self.env.items())]
        return " ".join([*assignments, *(shlex.quote(part) for part in self.argv)])


def kv_transfer_config(
    connector: str = "toolkit", *, cpu_bytes: int = DEFAULT_CPU_BYTES, extra: dict | None = None
) -> dict:
    """The `--kv-transfer-config` JSON object for `connector` ("toolkit" or "simplecpu")."""
    if connector not in SERVE_CONNECTORS:
        raise BadInput(f"connector: unknown connector {connector!r}; valid: {', '.join(SERVE_CONNECTORS)}")
    if cpu_bytes <= 0:
        raise BadInput(f"cpu_bytes: must be > 0, got {cpu_bytes}")
    extra_config = {"cpu_bytes_to_use": int(cpu_bytes)} if connector == "toolkit" else {}
    config = build_transfer_config(connector, {**extra_config, **(extra or {})})
    assert config is not None  # SERVE_CONNECTORS has a connector entry for every name
    return config


def given_options(args: list[str]) -> set[str]:
    """The long options present in `args`, normalised as vLLM's parser does (`--a_b=1` -> `--a-b`; `--no-x` -> `--x`)."""
    names = set()
    for arg in args:
        if arg.startswith("--") and len(arg) > 2:
            name = "--" + arg[2:].split("=", 1)[0].replace("_", "-")
            names.add(name)
            if name.startswith("--no-"):
                names.add("--" + name[len("--no-") :])
    return names


def build_serve_command(
    model: str,
    passthrough: list[str] | None = None,
    *,
    connector: str = "toolkit",
    cpu_bytes: int = DEFAULT_CPU_BYTES,
    connector_extra: dict | None = None,
    python: str | None = None,
    environ: dict | None = None,
) -> ServeCommand:
    """`python -m toolkit.serve.vllm_cli serve MODEL ...`: a tiny model name is resolved to its generated folder
    (weights and tokenizer made on first use) and gets the engine options the live tests use."""
    passthrough = list(passthrough or [])
    given = given_options(passthrough)
    if "--model" in given:
        raise BadInput("--model: give the model to kvtk serve (--model NAME|PATH), not after it")
    options: list[str] = []
    env: dict[str, str] = {}

    def default(option: str, *values: str) -> None:
        if option not in given:
            options.extend([option, *values])

    model_path, tiny = resolve_model(model)
    if tiny:
        from toolkit.host_cpu import live_model_dtype
        from toolkit.models import load_entry
        from toolkit.models.engine_preset import LIVE_SSM_CACHE_DTYPE

        entry = load_entry(model)
        dtype_given = _option_value(passthrough, "--dtype") or "auto"
        default("--served-model-name", model)
        default("--dtype", live_model_dtype(dtype_given, architecture=entry.architecture))
        if "state" in _preset_keys(model):
            default("--mamba-ssm-cache-dtype", LIVE_SSM_CACHE_DTYPE)
        default("--max-model-len", str(DEFAULT_TINY_MAX_MODEL_LEN))
        default("--prefix-match-unit", str(DEFAULT_TINY_PREFIX_MATCH_UNIT))
        default("--enforce-eager")
        default("--seed", "0")
        env.update({"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1"})
    default("--enable-prefix-caching")
    default("--enable-prompt-tokens-details")  # per-request cached tokens in usage.prompt_tokens_details
    default("--shutdown-timeout", str(DEFAULT_SHUTDOWN_TIMEOUT_S))
    if connector != "none":
        config = kv_transfer_config(connector, cpu_bytes=cpu_bytes, extra=connector_extra)
        if "--kv-transfer-config" in given:
            raise BadInput(
                "--kv-transfer-config: kvtk serve writes it; use --connector, --cpu-bytes and "
                "--connector-config instead (or run python -m toolkit.serve.vllm_cli serve)"
            )
        options.extend(["--kv-transfer-config", json.dumps(config, separators=(",", ":"))])
    environ = environ if environ is not None else {}
    env = {key: value for key, value in env.items() if key not in environ}
    argv = [python or sys.executable, "-m", LAUNCHER_MODULE, "serve", model_path, *options, *passthrough]
    return ServeCommand(argv=argv, env=env)


# A Hugging Face repository id: "org/name" (vLLM fetches it); anything else that is no folder is refused here.
_HF_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")


def resolve_model(model: str) -> tuple[str, bool]:
    """(what vLLM is given, whether it is a tiny model of this toolkit): a tiny model's name becomes its local folder
    (its seeded weights generated once if missing); a model folder or a Hugging Face id ("org/name") is passed
    through for vLLM to resolve. Anything else (a typo of a tiny model's name) is refused here, in one line, before
    vLLM starts: vLLM would look it up on the Hub and fail after tens of seconds with a long traceback."""
    from toolkit.models import ensure_model, list_models, load_entry

    try:
        load_entry(model)
    except ValueError:
        if os.path.isdir(model) or (_HF_ID.match(model) and not os.path.exists(model)):
            return model, False
        tiny = [entry.name for entry in list_models()]
        close = difflib.get_close_matches(model, tiny, n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise BadInput(
            f"--model: {model!r} is no tiny model{hint}, no model folder and no Hugging Face id (org/name); "
            f"tiny models: {', '.join(tiny)}"
        ) from None
    return str(ensure_model(model)), True


def _preset_keys(model: str) -> set[str]:
    from toolkit.models.engine_preset import live_preset

    return set(live_preset(model))


def _option_value(args: list[str], option: str) -> str | None:
    for index, arg in enumerate(args):
        if arg == option and index + 1 < len(args):
            return args[index + 1]
        if arg.startswith(option + "="):
            return arg.split("=", 1)[1]
    return None
