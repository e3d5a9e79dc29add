"""The tree stays walkable: module and function sizes, no private imports across modules, no import cycles, the
layering (core imports nothing above it). The rules and the hot paths exempt from the function limit:
structure_rules.py (`python -m tests.packaging.structure_rules` lists every violation)."""

import structure_rules as rules  # tests/packaging has no __init__: a package named "packaging" would shadow the real one


def test_the_tree_follows_its_structure_rules():
    found = rules.violations()
    assert found == [], "\n".join(found)


def test_the_checker_finds_what_it_checks(tmp_path, monkeypatch):
    pkg = tmp_path / "toolkit"
    (pkg / "core").mkdir(parents=True)
    (pkg / "engines").mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "core" / "__init__.py").write_text("")
    (pkg / "engines" / "__init__.py").write_text("")
    (pkg / "core" / "a.py").write_text(
        "from toolkit.core.b import _hidden\nfrom toolkit.engines import e\nfrom toolkit.core import b\nb._secret()\n"
    )
    (pkg / "core" / "b.py").write_text("import toolkit.core.a\n" + "x = 1\n" * (rules.MAX_MODULE_LINES + 1))
    body = "".join(f"    y{i} = {i}\n" for i in range(rules.MAX_FUNCTION_LINES + 1))
    (pkg / "engines" / "e.py").write_text("def long():\n" + body)
    monkeypatch.setattr(rules, "ROOT", tmp_path)
    monkeypatch.setattr(rules, "PACKAGE", pkg)
    found = "\n".join(rules.violations())
    assert "private import toolkit.core.a: _hidden" in found
    assert "private import toolkit.core.a: _secret read from toolkit.core.b" in found
    assert "layering toolkit.core.a: imports toolkit.engines" in found
    assert "module toolkit.core.b" in found
    assert "function toolkit.engines.e:long" in found
    assert "import cycle: toolkit.core.a -> toolkit.core.b" in found
