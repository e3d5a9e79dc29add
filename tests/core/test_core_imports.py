"""`toolkit/core` is pure Python: importing all of it loads neither torch nor vllm."""

import subprocess
import sys


def test_core_imports_neither_torch_nor_vllm():
    code = (
        "import sys, pkgutil, importlib, toolkit.core as core\n"
        "for m in pkgutil.walk_packages(core.__path__, 'toolkit.core.'): importlib.import_module(m.name)\n"
        "bad = sorted(n for n in sys.modules if n.split('.')[0] in ('torch', 'vllm'))\n"
        "print(bad); sys.exit(1 if bad else 0)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
