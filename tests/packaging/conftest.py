"""The size report (structure_rules.size_report) at the end of a run that ran the structure test: sizes are read,
not enforced, so they are printed where a reader of the test output sees them."""

import structure_rules as rules

_RAN = False


def pytest_runtest_logreport(report):
    global _RAN
    if report.when == "call" and report.nodeid.endswith("test_the_tree_follows_its_structure_rules"):
        _RAN = True


def pytest_terminal_summary(terminalreporter):
    if _RAN:
        terminalreporter.section("module and function sizes (a report, not a rule)")
        for line in rules.size_report():
            terminalreporter.write_line(line)
