"""The tree stays walkable: no private imports across modules, the layering (core imports nothing above it) and no
import cycle, function-level imports counted, between modules or between packages. Module and function sizes are a
report printed at the end of the run (conftest.py), not a rule. The rules: structure_rules.py
(`python -m tests.packaging.structure_rules` lists every violation and the size report)."""

import structure_rules as rules  # tests/packaging has no __init__: a package named "packaging" would shadow the real one


def test_the_tree_follows_its_structure_rules():
    found = rules.violations()
    assert found == [], "\n".join(found)


def _tree(tmp_path, monkeypatch, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = tmp_path / "toolkit" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    monkeypatch.setattr(rules, "ROOT", tmp_path)
    monkeypatch.setattr(rules, "PACKAGE", tmp_path / "toolkit")


def test_the_checker_finds_what_it_checks(tmp_path, monkeypatch):
    _tree(
        tmp_path,
        monkeypatch,
        {
            "__init__.py": "",
            "core/__init__.py": "",
            "engines/__init__.py": "",
            "core/a.py": "from toolkit.core.b import _hidden\nfrom toolkit.engines import e\nfrom toolkit.core import b\n"
            "b._secret()\n",
            "core/b.py": "x = 1\n",
            "engines/e.py": "",
        },
    )
    found = "\n".join(rules.violations())
    assert "private import toolkit.core.a: _hidden" in found
    assert "private import toolkit.core.a: _secret read from toolkit.core.b" in found
    assert "layering toolkit.core.a: imports toolkit.engines" in found
    assert "import cycle" not in found


def test_a_function_level_import_still_makes_a_cycle(tmp_path, monkeypatch):
    """The import inside a function only runs later; the two modules still need each other."""
    _tree(
        tmp_path,
        monkeypatch,
        {
            "__init__.py": "",
            "x/__init__.py": "",
            "x/a.py": "from toolkit.x import b\n",
            "x/b.py": "def late():\n    from toolkit.x.a import thing\n    return thing\n",
            "y/__init__.py": "",
            "y/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from toolkit.z.d import D\n",
            "z/__init__.py": "",
            "z/d.py": "def f():\n    import toolkit.y.c\n",
        },
    )
    found = rules.violations()
    assert "import cycle: toolkit.x.a -> toolkit.x.b" in found
    assert "import cycle: toolkit.y.c -> toolkit.z.d" in found
    assert "package import cycle: toolkit.y -> toolkit.z" in found


def test_packages_that_need_each_other_are_a_cycle_even_without_a_module_cycle(tmp_path, monkeypatch):
    _tree(
        tmp_path,
        monkeypatch,
        {
            "__init__.py": "",
            "p/__init__.py": "",
            "p/one.py": "from toolkit.q.two import T\n",
            "p/three.py": "",
            "q/__init__.py": "",
            "q/two.py": "",
            "q/four.py": "def f():\n    from toolkit.p import three\n",
            "core/__init__.py": "",
            "core/pool/__init__.py": "from toolkit.core.store.a import A\n",
            "core/store/__init__.py": "",
            "core/store/a.py": "",
            "core/store/b.py": "from toolkit.core.pool import P\n",
        },
    )
    found = rules.violations()
    assert not [f for f in found if f.startswith("import cycle")]
    assert "package import cycle: toolkit.p -> toolkit.q" in found
    assert "package import cycle: toolkit.core.pool -> toolkit.core.store" in found  # the core's stages one by one


def test_sizes_are_reported_not_refused(tmp_path, monkeypatch):
    body = "".join(f"    y{i} = {i}\n" for i in range(rules.FUNCTION_LINES_GUIDE + 1))
    _tree(
        tmp_path,
        monkeypatch,
        {"__init__.py": "", "big.py": "x = 1\n" * (rules.MODULE_LINES_GUIDE + 1), "long.py": "def long():\n" + body},
    )
    assert rules.violations() == []
    report = "\n".join(rules.size_report())
    assert f"{rules.MODULE_LINES_GUIDE + 1} lines  toolkit.big" in report
    assert f"{rules.FUNCTION_LINES_GUIDE + 2} lines  toolkit.long:long (line 1)" in report
